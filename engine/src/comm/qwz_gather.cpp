// qwZ: the quantized all-gather of weights. Each rank quantizes its shards (int8, symmetric) into
// one message of units, one all_gather carries every rank's message, and every rank dequantizes
// every message, its own included, so all ranks hold the same bits.
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "quantized_units.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/stream_launch.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::engine {
namespace {

constexpr std::string_view call_name = "quantized_all_gather";

// Where each part's unit starts in one rank's message, and the message's size.
struct message_layout {
  std::vector<std::size_t> offsets;
  std::size_t bytes = 0;
};

message_layout layout_of(std::span<const quantized_gather_part> parts, const kernels::quant_config& config) {
  message_layout m;
  m.offsets.reserve(parts.size());
  for (const quantized_gather_part& part : parts) {
    m.offsets.push_back(m.bytes);
    m.bytes += quantized_unit_bytes(part.count, config);
  }
  return m;
}

void check_parts(std::span<const quantized_gather_part> parts) {
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const quantized_gather_part& part = parts[i];
    detail::check_dtype(call_name, part.type);
    ZOE_EXPECTS(part.count == 0 || (part.send != nullptr && part.recv != nullptr), call_name, ": part ", i, " of ",
                part.count, " elements has a null ", part.send == nullptr ? "send" : "recv", " buffer");
  }
}

}  // namespace

std::size_t quantized_all_gather_message_bytes(std::span<const std::size_t> counts, std::size_t block) noexcept {
  std::size_t bytes = 0;
  for (const std::size_t count : counts) bytes += quantized_unit_bytes(count, qwz_config(block));
  return bytes;
}

std::size_t quantized_all_gather_scratch(std::size_t group_size, std::span<const std::size_t> counts,
                                         std::size_t block) noexcept {
  return group_size * quantized_all_gather_message_bytes(counts, block);
}

std::size_t quantized_all_gather_scratch(std::size_t group_size, std::size_t count, std::size_t block) noexcept {
  return quantized_all_gather_scratch(group_size, std::span<const std::size_t>(&count, 1), block);
}

void quantized_all_gather(communicator& group, device& dev, std::span<const quantized_gather_part> parts,
                          std::span<std::byte> scratch, stream_view stream, std::size_t block) {
  const kernels::quant_config config = qwz_config(block);
  config.validate();
  check_parts(parts);
  message_layout layout = layout_of(parts, config);
  const std::size_t ranks = group.size();
  detail::check_scratch(call_name, scratch, ranks * layout.bytes);
  if (layout.bytes == 0) return;  // every part is empty, on every rank alike: nothing to gather

  // The host task runs later, on the stream's worker: it keeps its own copies of the parts.
  auto shared_parts = std::make_shared<const std::vector<quantized_gather_part>>(parts.begin(), parts.end());
  auto offsets = std::make_shared<const std::vector<std::size_t>>(std::move(layout.offsets));
  std::byte* const all = scratch.data();
  std::byte* const mine = all + group.rank() * layout.bytes;

  // Quantize this rank's shards straight into its slot of the gathered buffer: the all-gather then
  // runs in place, and no separate send buffer is needed.
  const auto quantize_into = [shared_parts, offsets, config, mine](const auto& quantize) {
    const std::vector<quantized_gather_part>& ps = *shared_parts;
    for (std::size_t i = 0; i < ps.size(); ++i) {
      if (ps[i].count == 0) continue;
      quantize(kernels::const_tensor_view{ps[i].type, ps[i].send, ps[i].count}, config,
               detail::unit_at(mine + (*offsets)[i], ps[i].count, config));
    }
  };
  launch_kernel(
      dev, stream,
      [quantize_into] {
        quantize_into([](const kernels::const_tensor_view& in, const kernels::quant_config& c,
                         kernels::quantized_span out) { kernels::quantize(in, c, out); });
      },
      [&quantize_into](stream_view s) {
        quantize_into([s](const kernels::const_tensor_view& in, const kernels::quant_config& c,
                          kernels::quantized_span out) { kernels::cuda::quantize(in, c, out, s); });
      });

  group.all_gather(mine, all, layout.bytes, stream);

  const std::size_t message = layout.bytes;
  const auto dequantize_from = [shared_parts, offsets, config, all, ranks, message](const auto& dequantize) {
    const std::vector<quantized_gather_part>& ps = *shared_parts;
    for (std::size_t r = 0; r < ranks; ++r) {
      for (std::size_t i = 0; i < ps.size(); ++i) {
        const quantized_gather_part& p = ps[i];
        if (p.count == 0) continue;
        auto* const out = static_cast<std::byte*>(p.recv) + r * p.count * kernels::dtype_size(p.type);
        dequantize(detail::unit_at(static_cast<const std::byte*>(all + r * message + (*offsets)[i]), p.count, config),
                   config, kernels::tensor_view{p.type, out, p.count});
      }
    }
  };
  launch_kernel(
      dev, stream,
      [dequantize_from] {
        dequantize_from([](kernels::const_quantized_span in, const kernels::quant_config& c,
                           const kernels::tensor_view& out) { kernels::dequantize(in, c, out); });
      },
      [&dequantize_from](stream_view s) {
        dequantize_from([s](kernels::const_quantized_span in, const kernels::quant_config& c,
                            const kernels::tensor_view& out) { kernels::cuda::dequantize(in, c, out, s); });
      });
}

void quantized_all_gather(communicator& group, device& dev, const quantized_gather_part& part,
                          std::span<std::byte> scratch, stream_view stream, std::size_t block) {
  quantized_all_gather(group, dev, std::span<const quantized_gather_part>(&part, 1), scratch, stream, block);
}

}  // namespace zoe::engine
