#pragma once
// ZeRO++'s quantized collectives, written once over the communicator seam for every backend:
//   qwZ  quantized_all_gather: each rank block-quantizes its shard to int8 (symmetric, one fp32
//        scale per block) into one message holding codes and scales, the group all-gathers the
//        messages, and every rank dequantizes every rank's message into the full parameter.
//   qgZ  quantized_reduce_scatter: each rank int4-quantizes every destination's block of its
//        gradient, placed in the order of the hierarchical all-to-all (the swizzle), all-to-all
//        inside the node, dequantize-reduce-requantize (int4) per node, all-to-all across nodes,
//        dequantize-reduce and average.
// The arithmetic is the kernels' (kernels/quantize.hpp); these functions only orchestrate, in
// stream order on `dev` (host tasks on the host device, the CUDA launchers on a CUDA device), so
// every call returns once its work is queued, like the communicator's collectives.
//
// Sizes: any element count, padded to whole blocks (padding codes are zero and never land in a
// result), never refused and never sent unquantized.
//
// Scratch: the caller lends device memory of `dev` (host memory on the host device), 16-byte
// aligned, of at least the bytes the matching *_scratch function gives, until the stream has run
// the call; so every byte is in the caller's footprint plan and nothing is allocated here.
//
// Thread-safety: as the collectives they issue: calls on one group from one thread at a time, in
// the same order on every rank (qgZ issues on the world's node_local() and cross_node() groups).
// The size functions are pure.
//
// Errors: usage_error at once for bad arguments (null buffers, scratch too small or misaligned, a
// bad block, a world whose node-local and cross-node groups do not form its topology); the
// communicator's and the kernels' errors as they report them (see communicator.hpp).
//
// Message layout (one "unit" per quantized run of `count` elements, in block `block`):
//   [codes: blocks(count) * block * bits / 8 bytes][scales: blocks(count) fp32][padding to 16 bytes]
// so one unit is one contiguous message and one collective carries codes and scales together. A run
// shorter than `block` is one block of its own length rounded up to 8 elements: the same codes and
// scale (a block's scale comes from its elements alone), without sending a whole padded block.

#include <cstddef>
#include <span>

#include "zoe/core/device.hpp"
#include "zoe/core/stream_view.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/kernels/dtype.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::engine {

// Block sizes, by measurement (relative RMS error of one round trip on 2^20 values; the scale's
// share of the message is 4 / block bytes per element over the codes' 1 or 1/2):
//            normal   Student-t(3)  rows of 1024 scaled 1e-3..1   scale bytes
//   int8 2048  0.83%   3.3%          1.0%                          0.2%
//   int8  512  0.74%   2.2%          0.74%                         0.8%
//   int4 2048  15%     46%           16%                           0.4%
//   int4  512  13%     33%           13%                           1.6%
//   int4  128  12%     22%           12%                           6.3%
// int8 weights are fine at 2048 (each gather quantizes the master weights afresh: the error does
// not accumulate); int4 gradients, heavy-tailed, gain a third at 512 for 1.6% more bytes.
/// Elements per scale of qwZ's int8 weight blocks (zero_quantized_weights).
inline constexpr std::size_t qwz_default_block = 2048;
/// Elements per scale of qgZ's int4 gradient blocks (zero_quantized_gradients).
inline constexpr std::size_t qgz_default_block = 512;
/// Alignment of scratch and of every unit inside it.
inline constexpr std::size_t quantized_scratch_alignment = 16;

/// The quantization qwZ uses: int8, symmetric, `block` elements per scale.
[[nodiscard]] constexpr kernels::quant_config qwz_config(std::size_t block = qwz_default_block) noexcept {
  return {8, block, true};
}
/// The quantization qgZ uses at both stages: int4, symmetric, `block` elements per scale.
[[nodiscard]] constexpr kernels::quant_config qgz_config(std::size_t block = qgz_default_block) noexcept {
  return {4, block, true};
}

/// Bytes of one unit (see the top of this file): `count` elements quantized in `config`, codes,
/// scales (and zero points when asymmetric), padded to quantized_scratch_alignment. Never throws
/// (the caller keeps the sizes within memory, as its buffers do).
[[nodiscard]] std::size_t quantized_unit_bytes(std::size_t count, const kernels::quant_config& config) noexcept;

// ---- qwZ -------------------------------------------------------------------------------------------

/// One parameter of a quantized all-gather: this rank's shard, `count` elements of `type` at
/// `send`; `recv` receives group.size() * count elements, rank r's shard at r * count. `send` may
/// be recv + rank * count (in place); otherwise it overlaps no part's `recv`.
struct quantized_gather_part {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  kernels::dtype type = kernels::dtype::fp32;
};

/// Bytes of the message one rank sends for `parts` (the sum of their units in qwz_config(block));
/// every other rank of the group receives this many. Never throws.
[[nodiscard]] std::size_t quantized_all_gather_message_bytes(std::span<const std::size_t> counts,
                                                             std::size_t block = qwz_default_block) noexcept;
/// Scratch quantized_all_gather needs on a group of `group_size` ranks for parts of `counts`
/// elements: group_size * the message. Never throws.
[[nodiscard]] std::size_t quantized_all_gather_scratch(std::size_t group_size, std::span<const std::size_t> counts,
                                                       std::size_t block = qwz_default_block) noexcept;
/// The same for one part of `count` elements.
[[nodiscard]] std::size_t quantized_all_gather_scratch(std::size_t group_size, std::size_t count,
                                                       std::size_t block = qwz_default_block) noexcept;

/// qwZ: all-gathers every part over `group` (any communicator: the world, or an hpZ group) as ONE
/// all_gather of one message per rank holding every part's int8 codes and scales (counted by the
/// group as one all_gather of quantized_all_gather_message_bytes). Every rank's segment of every
/// `recv`, its own included, is the dequantized value, so all ranks hold the same bits (at group
/// size 1 too: the result is the quantize round trip, no communication). Each element is within
/// half a step of its block's scale (max |x| of the block / 127 / 2) of the input, plus the
/// rounding to the part's type. Parts' counts and types must agree on every rank (a count of 0 is
/// allowed and sends nothing). `scratch`: at least quantized_all_gather_scratch(group.size(),
/// counts, block) bytes, lent until the stream has run the call.
void quantized_all_gather(communicator& group, device& dev, std::span<const quantized_gather_part> parts,
                          std::span<std::byte> scratch, stream_view stream, std::size_t block = qwz_default_block);
/// One part.
void quantized_all_gather(communicator& group, device& dev, const quantized_gather_part& part,
                          std::span<std::byte> scratch, stream_view stream, std::size_t block = qwz_default_block);

// ---- qgZ -------------------------------------------------------------------------------------------

/// The two-level topology of a world: cross_node().size() nodes of node_local().size() ranks.
/// Throws usage_error when their product is not world.size() or this rank's place in them is not
/// node = rank / ranks_per_node, local = rank % ranks_per_node (communicator.hpp's placement).
[[nodiscard]] kernels::topology qgz_topology(communicator& world);

/// Scratch quantized_reduce_scatter needs for `count` elements per rank on `topo`, on a device of
/// kind `kind` (the CUDA reductions need fp32 workspace; the host's none): two buffers of
/// topo.world() units (the swizzled send and the node-local receive; the cross-node stage reuses
/// them) and the kernels' workspace. Never throws.
[[nodiscard]] std::size_t quantized_reduce_scatter_scratch(kernels::topology topo, std::size_t count, device_kind kind,
                                                           std::size_t block = qgz_default_block) noexcept;

/// qgZ, with reduce_scatter's contract: `send` holds world.size() * count elements of `type`
/// (fp32, fp16 or bf16); world rank r receives in `recv` (count elements of `type`) the reduction
/// of block r (elements [r * count, (r + 1) * count)) of every rank's `send`: sum, or mean (the
/// sum over world.size()). `recv` may be send + rank * count (in place).
///
/// With N = cross_node().size() nodes of R = node_local().size() ranks (world rank n * R + l):
///   1. each block d is int4-quantized (qgz_config(block), padded per block) into slot
///      l_d * N + n_d of the send buffer (d = n_d * R + l_d): the swizzle, so the R slices of N
///      consecutive units are the messages to the R local ranks;
///   2. all_to_all over node_local() (skipped when R = 1): local rank l receives, from every rank
///      of its node, the N units for the ranks with local rank l;
///   3. per node n: dequantize the R units, sum in local-rank order (fp32), requantize to int4;
///      skipped when R = 1 (the units pass through as quantized) and when N = 1 (the node's sum is
///      the result: step 5 reduces the R units);
///   4. all_to_all over cross_node() (skipped when N = 1): each rank receives the N node sums of
///      its own block;
///   5. dequantize the units (the N node sums, or the R units of step 2 when N = 1), sum in order
///      (fp32), times 1 / world.size() for a mean, into `recv` in `type`.
/// Every reduction runs in a fixed order, so the result does not depend on timing. Error per
/// element against the exact reduction (before the mean's division): at most the sum over ranks of
/// half the step of the rank's block (max |x| / 7 / 2) plus, when R > 1 and N > 1, the sum over
/// nodes of half the step of the node sum's block, plus fp32 and output rounding.
///
/// Bytes: node_local() counts one all_to_all of (R - 1) * N units (intra-node); cross_node() one
/// all_to_all of (N - 1) units (inter-node), a unit being quantized_unit_bytes(count,
/// qgz_config(block)) ~ count / 2 bytes. The world group itself sends nothing.
///
/// `scratch`: at least quantized_reduce_scatter_scratch(qgz_topology(world), count, dev.kind(),
/// block) bytes, lent until the stream has run the call. Collectives on the world's node_local()
/// and cross_node() groups, so issue it in the same order on every rank as any collective of the
/// world.
void quantized_reduce_scatter(communicator& world, device& dev, const void* send, void* recv, std::size_t count,
                              kernels::dtype type, reduce_op op, std::span<std::byte> scratch, stream_view stream,
                              std::size_t block = qgz_default_block);

}  // namespace zoe::engine
