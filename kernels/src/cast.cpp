#include "zoe/kernels/cast.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "cpu/kernel_table.hpp"
#include "parallel.hpp"
#include "zoe/core/check.hpp"

namespace zoe::kernels {
namespace {

// 16-bit input is widened this many elements at a time (a multiple of 8: it does not change which
// fp64 lane an element goes to, so not the order of additions either).
constexpr std::size_t sum_stage = 4096;
static_assert(detail::sum_chunk % sum_stage == 0 && sum_stage % detail::sum_lanes == 0);

}  // namespace

namespace detail {

void expect_data(const_tensor_view x, const char* what) {
  ZOE_EXPECTS(x.count == 0 || x.data != nullptr, what, ": null data with ", x.count, " elements");
}

cast_args make_cast_args(const_tensor_view src, tensor_view dst) {
  expect_data(src, "cast: source");
  expect_data(dst, "cast: destination");
  ZOE_EXPECTS(src.count == dst.count, "cast: source has ", src.count, " elements, destination ", dst.count);
  ZOE_EXPECTS(src.type == dst.type || !ranges_overlap(src.data, src.bytes(), dst.data, dst.bytes()),
              "cast: ", dtype_name(src.type), " source and ", dtype_name(dst.type), " destination overlap");
  return {src.data, src.type, dst.data, dst.type};
}

cast_args make_accumulate_args(const_tensor_view src, std::span<float> dst) {
  expect_data(src, "accumulate: source");
  ZOE_EXPECTS(dst.empty() || dst.data() != nullptr, "accumulate: null destination with ", dst.size(), " elements");
  ZOE_EXPECTS(src.count == dst.size(), "accumulate: source has ", src.count, " elements, destination ", dst.size());
  ZOE_EXPECTS(!ranges_overlap(src.data, src.bytes(), dst.data(), dst.size_bytes()),
              "accumulate: ", dtype_name(src.type), " source and fp32 destination overlap");
  return {src.data, src.type, dst.data(), dtype::fp32};
}

}  // namespace detail

void accumulate(const_tensor_view src, std::span<float> dst) {
  const detail::cast_args args = detail::make_accumulate_args(src, dst);
  const detail::kernel_table& k = detail::active_table();
  detail::parallel_ranges(src.count, detail::elementwise_grain,
                          [&](std::size_t b, std::size_t e) { k.accumulate_range(args, b, e); });
}

void cast(const_tensor_view src, tensor_view dst) {
  const detail::cast_args args = detail::make_cast_args(src, dst);
  if (src.type == dst.type) {
    if (src.data != dst.data && src.count > 0) std::memmove(dst.data, src.data, src.bytes());
    return;
  }
  const detail::kernel_table& k = detail::active_table();
  detail::parallel_ranges(src.count, detail::elementwise_grain,
                          [&](std::size_t b, std::size_t e) { k.cast_range(args, b, e); });
}

bool has_inf_nan(const_tensor_view x) {
  detail::expect_data(x, "has_inf_nan");
  const detail::kernel_table& k = detail::active_table();
  std::atomic<bool> found{false};
  detail::parallel_ranges(x.count, detail::elementwise_grain, [&](std::size_t b, std::size_t e) {
    if (!found.load(std::memory_order_relaxed) && k.nonfinite_range(x.data, x.type, b, e)) {
      found.store(true, std::memory_order_relaxed);
    }
  });
  return found.load();
}

double sum_of_squares(const_tensor_view x) {
  std::vector<double> partials((x.count + detail::sum_chunk - 1) / detail::sum_chunk);
  return sum_of_squares(x, std::as_writable_bytes(std::span<double>(partials)));
}

double sum_of_squares(const_tensor_view x, std::span<std::byte> workspace) {
  detail::expect_data(x, "sum_of_squares");
  const std::size_t chunks = (x.count + detail::sum_chunk - 1) / detail::sum_chunk;
  double* const partial = detail::workspace_as<double>(workspace, sum_of_squares_workspace(x.count), "sum_of_squares");
  const detail::kernel_table& k = detail::active_table();
  detail::parallel_ranges(chunks, 1, [&](std::size_t first, std::size_t last) {
    std::vector<float> staged(x.type == dtype::fp32 ? 0 : sum_stage);
    for (std::size_t c = first; c < last; ++c) {
      double lanes[detail::sum_lanes] = {};
      const std::size_t begin = c * detail::sum_chunk;
      const std::size_t end = std::min(x.count, begin + detail::sum_chunk);
      for (std::size_t s = begin; s < end; s += sum_stage) {
        const std::size_t len = std::min(sum_stage, end - s);
        if (x.type == dtype::fp32) {
          k.sum_squares(static_cast<const float*>(x.data) + s, len, lanes);
        } else {
          const detail::cast_args widen{static_cast<const std::byte*>(x.data) + s * dtype_size(x.type), x.type,
                                        staged.data(), dtype::fp32};
          k.cast_range(widen, 0, len);
          k.sum_squares(staged.data(), len, lanes);
        }
      }
      partial[c] = detail::combine_sum_lanes(lanes);
    }
  });
  double total = 0.0;
  for (std::size_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

}  // namespace zoe::kernels
