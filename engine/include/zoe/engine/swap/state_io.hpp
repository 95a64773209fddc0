#pragma once
// Whole states of a shard read and written synchronously, wherever the state's home is: device
// memory (a device copy), host memory (a copy), or an NVMe extent (through a swap channel of its
// own and pinned staging memory). For what is not on the hot path: initial values, checkpoint save
// and load, debugging reads, tests. The hot paths (parameter swapper, gradient path, optimizer
// step) move their own bytes.
//
// Every move goes through the tier manager's transitions: a read runs begin_move(read) ->
// finish_move (the state stays resident), a write begin_move(write) -> finish_move (resident and
// clean) or abort_move (released and dirty) on failure.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::engine {

/// Not thread-safe: one thread at a time drives it (its swap channel has one issuer); it may be
/// handed from one thread to another while idle. The tier manager, device, pinned resource and
/// store must outlive it.
class state_io {
 public:
  /// `staging_bytes` of pinned memory (taken from `pinned` when the first NVMe move needs it; 0:
  /// four aio.block_size chunks) carry NVMe moves in chunk-sized pieces, several in flight.
  /// `store` may be null when nothing is on nvme.
  state_io(tier_manager& tiers, device& dev, allocators::pinned_host_resource& pinned, io::swap_store* store,
           std::size_t staging_bytes = 0);
  ~state_io();
  state_io(const state_io&) = delete;
  state_io& operator=(const state_io&) = delete;

  /// Copies state `s` of `p`'s shard (exactly state_bytes(p, s) bytes, host memory) into `out`.
  /// Throws usage_error naming the parameter and state when `out` has another size or the state is
  /// released or in flight; io_error or corruption_error naming the parameter, state, path and
  /// offset when an NVMe read fails (the state stays resident).
  void read(parameter_id p, state_kind s, std::span<std::byte> out);
  /// Writes `data` (exactly state_bytes(p, s) bytes, host memory) to state `s`'s home. Resident and
  /// clean afterwards. Throws usage_error naming the parameter and state for another size or a
  /// state in flight; io_error naming the path and offset when an NVMe write fails (the state is
  /// then released and dirty: its old contents are gone, `data` is still the caller's).
  void write(parameter_id p, state_kind s, std::span<const std::byte> data);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
