#pragma once
// ZeRO stage 1's gradient accumulation (the gradient path's part for it; gradient_path.cpp and
// gradient_reduction.cpp call it).
// Stage 0 runs it alike on its one whole shard (DeepSpeed's engine all-reduces unpartitioned
// gradients only at the accumulation boundary too); its fold is then all-reduced.
//
// DeepSpeed's stage 1 does not partition gradients: every rank accumulates its whole gradient
// through the micro-batches of a step and reduces only at the gradient-accumulation boundary
// (engine.py, allreduce_gradients: reduce_gradients() runs only when is_gradient_accumulation_boundary()
// at stage 1; stage 2's partition_gradients reduce-scatters every micro-batch). So here, for stage 1
// on several ranks with several micro-batches per step (accumulates_gradients_locally):
//  - before the step's last micro-batch, a module's gradients in its bucket are added, in fp32,
//    into this rank's whole-parameter accumulation (the first add of a step overwrites), and the
//    bucket goes back without a reduction;
//  - in the last micro-batch the accumulation is added to the bucket's gradients and written back
//    into the bucket in the working dtype (fold), which the gradient path then reduce-scatters as
//    at stage 2: one reduction per parameter per step, the 1/N partition accumulated into the
//    gradient state;
//  - a module accumulated earlier in the step but not acquired in the last micro-batch is
//    reduced when the last micro-batch ends (held_modules), in module order on every rank.
// The working dtype of the fold rounds the accumulated sum once (fp16 / bf16), as DeepSpeed's stage
// 1 accumulates into the 16-bit param.grad; fp32 training rounds nothing more than stage 2.
//
// Memory (footprint_plan: local_gradient_*_bytes): each parameter's padded fp32 gradient, on the
// device when its gradient state is on the device (kernels queued on the caller's stream), else in
// pageable host memory, added piece by piece through the gradient path's pinned staging buffers
// on the caller's thread (each piece copied off the device and waited for).
//
// Thread-safety: add() and fold() for different modules may run on different threads; forget()
// and held_modules() on the thread that begins and ends micro-batches, not concurrently with them.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"

namespace zoe::engine::detail {

class local_accumulation {
 public:
  /// Takes the device blocks for the parameters whose gradient state is on the device, and the
  /// host memory for the rest. `staging` (the gradient path's pinned pool, pieces of whole fp32
  /// elements) is needed when any gradient state is off the device (usage_error otherwise).
  /// memory_error naming the keys when the device refuses.
  local_accumulation(const tier_manager& tiers, std::size_t world_size, device& dev, allocators::buffer_pool* staging);
  ~local_accumulation();
  local_accumulation(const local_accumulation&) = delete;
  local_accumulation& operator=(const local_accumulation&) = delete;

  /// Before the step's last micro-batch: adds module `m`'s gradients (`memory`: one padded buffer
  /// of the working dtype per parameter, in module order) into its accumulation, in stream order on
  /// `stream` (host homes: done, and the stream synchronized, when it returns).
  void add(module_id m, std::span<void* const> memory, stream_view stream);
  /// In the last micro-batch: when `m` was added to in this step, adds its accumulation to
  /// `memory` and leaves the sum there in the working dtype (stream order as add()).
  void fold(module_id m, std::span<void* const> memory, stream_view stream);
  /// Whether module `m` was added to in this step and not yet folded.
  [[nodiscard]] bool holds(module_id m) const noexcept { return held_[m] != 0; }
  /// The modules added to and not folded, in module order.
  [[nodiscard]] std::vector<module_id> held_modules() const;
  /// A new step (or a failed one): nothing is held.
  void forget() noexcept;
  /// A stream of its own, for the reductions of held modules when the last micro-batch ends.
  [[nodiscard]] stream_view stream() const noexcept { return stream_.view(); }

 private:
  // One parameter: accumulation += source (or = source when `overwrite`), or, with `write_back`,
  // source := accumulation in the working dtype.
  void transfer(parameter_id p, void* source, bool overwrite, bool write_back, stream_view stream);

  const tier_manager& tiers_;
  std::size_t world_;
  device& dev_;
  allocators::buffer_pool* staging_;
  std::byte* device_block_ = nullptr;
  std::uint64_t device_bytes_ = 0;
  std::vector<float> host_;
  std::vector<float*> where_;  ///< per parameter, its padded fp32 accumulation
  std::vector<bool> on_device_;
  std::vector<std::uint8_t> held_;  ///< per module (bytes: modules are added from several threads)
  device_stream stream_;
};

}  // namespace zoe::engine::detail
