#pragma once
// States of a shard read and written synchronously, whole or a range at a time, wherever the
// state's home is: device memory (a device copy), host memory (a copy), or an NVMe extent (one
// demand piece in the caller's memory through the rank's mover, waited for; the I/O engine bounces
// what is not aligned for O_DIRECT). For what is not on the hot path: initial values, checkpoint
// save and load, debugging reads, tests.
//
// Every access goes through the tier manager's transitions, so nothing else moves the state
// meanwhile: a read runs begin_move(read) -> finish_move (the state stays resident), a write
// begin_move(write) -> finish_move (resident and clean) or abort_move (released and dirty).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "zoe/core/device.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"
#include "zoe/engine/swap/mover.hpp"

namespace zoe::engine {

/// Not thread-safe: one thread at a time drives it (its device stream); it may be handed from one
/// thread to another while idle. The tier manager, device and mover must outlive it.
class state_io {
 public:
  /// `movers` may be null, or have no store, when nothing is on nvme. Makes a stream on `dev`
  /// (device_error if refused).
  state_io(tier_manager& tiers, device& dev, mover* movers);
  ~state_io();
  state_io(const state_io&) = delete;
  state_io& operator=(const state_io&) = delete;

  /// Copies bytes [offset, offset + out.size()) of state `s` of `p`'s shard into `out` (host
  /// memory). Throws usage_error naming the parameter and state when the range passes the state's
  /// end or the state is released or in flight; io_error or corruption_error naming the parameter,
  /// the state, the path and the offset when an NVMe read fails (the state stays resident).
  void read(parameter_id p, state_kind s, std::uint64_t offset, std::span<std::byte> out);
  /// read() of the whole state: `out` must have exactly state_bytes(p, s) bytes.
  void read(parameter_id p, state_kind s, std::span<std::byte> out);
  /// Writes `data` (host memory) over bytes [offset, offset + data.size()) of state `s`'s home; the
  /// state is resident and clean afterwards (the caller writes every range before it relies on the
  /// rest). On nvme the range must start at a multiple of write_granule() and end at one or at the
  /// state's end (the store keeps one checksum per chunk). Throws usage_error naming the parameter
  /// and state for a range past the end, a misaligned NVMe range, or a state in flight; io_error
  /// naming the path and offset when an NVMe write fails (the state is then released and dirty:
  /// its old contents are gone, `data` is still the caller's).
  void write(parameter_id p, state_kind s, std::uint64_t offset, std::span<const std::byte> data);
  /// write() of the whole state: `data` must have exactly state_bytes(p, s) bytes.
  void write(parameter_id p, state_kind s, std::span<const std::byte> data);
  /// Writes `data` (exactly state_bytes(p, s) bytes) to the shadow extent of an NVMe state
  /// (tier_manager::shadow), leaving its home as it was; tier_manager::commit_shadow then makes it
  /// the home. The state is held (in flight) meanwhile and resident afterwards, as before. Throws
  /// usage_error naming the parameter and state when it has no shadow, is not resident or another
  /// mover has it, or `data` has another size; io_error naming the path when the write fails (the
  /// home still holds the old value).
  void write_shadow(parameter_id p, state_kind s, std::span<const std::byte> data);
  /// The alignment of an NVMe write range (the store's aio.block_size); 4096 without a store.
  [[nodiscard]] std::uint64_t write_granule() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
