// Workspace sizes of every launcher, CPU and CUDA, in one place and in every build, so a caller can
// size the workspace (the engine takes it from its arena) whether or not CUDA is compiled in.
#include "kernel_args.hpp"
#include "zoe/core/check.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cuda.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::kernels {
namespace {

std::size_t sum_partials_bytes(std::size_t count) noexcept {
  return (count + detail::sum_chunk - 1) / detail::sum_chunk * sizeof(double);
}

}  // namespace

namespace detail {

void* expect_workspace(std::span<std::byte> workspace, std::size_t bytes, std::size_t alignment, const char* what) {
  if (bytes == 0) return workspace.data();
  ZOE_EXPECTS(workspace.size() >= bytes, what, ": the workspace holds ", workspace.size(), " bytes, the launch needs ",
              bytes);
  ZOE_EXPECTS(reinterpret_cast<std::uintptr_t>(workspace.data()) % alignment == 0, what, ": the workspace at ",
              static_cast<const void*>(workspace.data()), " is not aligned to ", alignment, " bytes");
  return workspace.data();
}

}  // namespace detail

// The CPU reduces one block at a time in a buffer of its own per task, small enough for L1.
std::size_t reduce_requantize_workspace(std::size_t /*count*/) noexcept { return 0; }
std::size_t reduce_dequantize_workspace(std::size_t /*inputs*/, std::size_t /*count*/) noexcept { return 0; }
std::size_t sum_of_squares_workspace(std::size_t count) noexcept { return sum_partials_bytes(count); }

namespace cuda {

// The device reduces whole tensors per launch: the sum of all elements in fp32 before requantizing.
std::size_t reduce_requantize_workspace(std::size_t count) noexcept { return count * sizeof(float); }
std::size_t reduce_dequantize_workspace(std::size_t inputs, std::size_t count) noexcept {
  return inputs > detail::reduce_batch_max ? count * sizeof(float) : 0;
}
std::size_t sum_of_squares_workspace(std::size_t count) noexcept { return sum_partials_bytes(count); }

}  // namespace cuda
}  // namespace zoe::kernels
