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

// One part's unit in a rank's message.
struct part_unit {
  quantized_gather_part part;
  detail::unit_shape shape;
  std::size_t offset = 0;  // from the start of the message
};

// The units of `parts`, in order, and the message's size.
struct message_layout {
  std::vector<part_unit> units;
  std::size_t bytes = 0;
};

message_layout layout_of(std::span<const quantized_gather_part> parts, const kernels::quant_config& config) {
  message_layout m;
  m.units.reserve(parts.size());
  for (const quantized_gather_part& part : parts) {
    m.units.push_back({part, detail::shape_of(part.count, config), m.bytes});
    m.bytes += m.units.back().shape.bytes;
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

  // The host tasks run later, on the stream's worker: they keep their own copy of the layout.
  const auto units = std::make_shared<const std::vector<part_unit>>(std::move(layout.units));
  const std::size_t message = layout.bytes;
  std::byte* const all = scratch.data();
  std::byte* const mine = all + group.rank() * message;

  // Quantize this rank's shards straight into its slot of the gathered buffer: the all-gather then
  // runs in place, and no separate send buffer is needed.
  const auto quantize_into = [units, mine](const auto& quantize) {
    for (const part_unit& u : *units) {
      if (u.part.count == 0) continue;
      quantize(kernels::const_tensor_view{u.part.type, u.part.send, u.part.count}, u.shape.config,
               detail::unit_at(mine + u.offset, u.shape));
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

  group.all_gather(mine, all, message, stream);

  const auto dequantize_from = [units, all, ranks, message](const auto& dequantize) {
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::byte* const from = all + r * message;
      for (const part_unit& u : *units) {
        if (u.part.count == 0) continue;
        auto* const out = static_cast<std::byte*>(u.part.recv) + r * u.part.count * kernels::dtype_size(u.part.type);
        dequantize(detail::unit_at(from + u.offset, u.shape), u.shape.config,
                   kernels::tensor_view{u.part.type, out, u.part.count});
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
