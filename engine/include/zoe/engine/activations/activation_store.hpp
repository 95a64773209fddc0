#pragma once
// Activation checkpoints (ZeRO-R's Pa+cpu): forward hands over device buffers it will need again
// in backward; the store copies each off the device at once (so the device memory is the
// caller's again), keeps it in its pinned host share, or on NVMe once that share is full, and
// brings it back into device memory when backward loads it. Backward asks in the reverse order of
// the saves, so loading one starts bringing back the ones saved before it, as far as the device
// share (zoe.activations.prefetch_bytes) allows.
//
// Nothing is lost: a save that goes to NVMe returns once its write is known good (it passes
// through the pinned staging memory, piece by piece, and fails with io_error naming the swap
// folders, having saved nothing, when a write fails: the caller's device buffer is untouched); a
// torn or corrupt NVMe copy fails its checksum on load (corruption_error naming the swap folders,
// the extent and the chunk), never read silently. Prefetch brings back activations held in pinned
// memory; one on NVMe is read when it is loaded (the load waits for it: load_wait_seconds).
//
// The pinned share and the staging memory are taken from the pinned resource at the first save
// that needs them, so an engine that never saves an activation holds none of it.
//
// Thread-safety: one thread drives save/load/free/clear (the engine's micro-batch thread). The
// store starts no thread: its NVMe reads and writes run on that thread, through a swap channel it
// makes at the first one, and its copies on the caller's streams and a prefetch stream of its own.
// stats() may be read from any thread.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/swap/mover.hpp"

namespace zoe::engine {

using activation_id = std::uint64_t;

struct activation_store_options {
  /// Pinned host bytes for activations (zoe.activations.host_bytes); what does not fit goes to
  /// NVMe when nvme_bytes allows, else save() throws memory_error naming the key.
  std::uint64_t host_bytes = 0;
  /// Device bytes that prefetched activations may hold ahead of their load
  /// (zoe.activations.prefetch_bytes); 0: no prefetch (a load brings back only its own).
  std::uint64_t prefetch_bytes = 0;
  /// Bytes of the swap store activations may take (zoe.activations.nvme_bytes; each activation
  /// counted as the store rounds its extent); 0, or no store: activations never go to NVMe.
  std::uint64_t nvme_bytes = 0;
  /// Pinned bytes NVMe reads and writes pass through, piece by piece (footprint_plan::
  /// activation_staging_bytes): a multiple of the store's aio.block_size. Used with nvme_bytes > 0.
  std::uint64_t staging_bytes = 0;
};

struct activation_stats {
  std::uint64_t saves = 0;
  std::uint64_t loads = 0;
  std::uint64_t prefetch_hits = 0;    ///< loads whose bytes were already on their way or back
  std::uint64_t bytes_to_host = 0;    ///< device -> pinned host (the share, or the staging memory to NVMe)
  std::uint64_t bytes_to_device = 0;  ///< pinned host -> device (the share, or the staging memory from NVMe)
  std::uint64_t bytes_written = 0;    ///< to NVMe
  std::uint64_t bytes_read = 0;       ///< from NVMe
  std::uint64_t peak_host_bytes = 0;  ///< most of the pinned share in use
  std::uint64_t peak_nvme_bytes = 0;
  double load_wait_seconds = 0;  ///< time load() blocked for bytes not yet back
};

class activation_store {
 public:
  /// `movers` may be null or have no swap store: everything must then fit the host share. NVMe
  /// spills and loads go through the mover's swap store. With prefetch_bytes, makes a stream on
  /// `dev` for prefetching (device_error if refused). Everything passed must outlive the store.
  activation_store(device& dev, allocators::pinned_host_resource& pinned, mover* movers,
                   activation_store_options options);
  ~activation_store();
  activation_store(const activation_store&) = delete;
  activation_store& operator=(const activation_store&) = delete;

  /// Copies `bytes` at device address `src` off the device in order with `stream` (work queued on
  /// `stream` after the call may overwrite or free `src`). usage_error for null or zero bytes;
  /// memory_error naming zoe.activations.host_bytes (and nvme_bytes) when neither the host share
  /// nor the NVMe share has room, or when the pinned resource refuses the share; io_error naming
  /// the swap folders when an NVMe write fails (nothing is saved then, and `src` is intact).
  [[nodiscard]] activation_id save(const void* src, std::size_t bytes, stream_view stream);
  /// Device memory (allocated from `dev`, counted in its budget) holding activation `id`'s bytes
  /// for work queued on `stream` after the call; valid until free(id). Starts the prefetch of the
  /// activations saved before `id`. usage_error for an unknown, freed or already loaded id; what the
  /// NVMe read throws (naming the path and offset); memory_error when the device refuses.
  [[nodiscard]] void* load(activation_id id, stream_view stream);
  /// Forgets `id`; its device memory (if loaded) is freed after the work on `stream`. usage_error
  /// naming the id for an unknown or already freed id.
  void free(activation_id id, stream_view stream);
  /// Frees every activation (the end of a micro-batch): a loaded one's device memory after the work
  /// queued on the stream it was loaded on (which must still exist). Never throws.
  void clear() noexcept;
  /// Activations held now (saved and not freed).
  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] activation_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
