// Activation checkpoints: device -> pinned host share (or NVMe through pinned staging) -> device.
#include "zoe/engine/activations/activation_store.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "host_share.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/checked.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/swap/carried_error.hpp"

namespace zoe::engine {
namespace {

// The swap store rounds an extent to 4 KiB, or to its block_size from one block up (swap_store.hpp):
// what an activation of `bytes` takes of zoe.activations.nvme_bytes; nothing when that does not
// fit 64 bits (more than any share).
std::optional<std::uint64_t> extent_charge(std::uint64_t bytes, std::uint64_t block) noexcept {
  constexpr std::uint64_t page = 4096;
  return bytes >= block ? round_up_checked(bytes, block) : round_up_checked(bytes, page);
}

std::string folders_of(const io::swap_store& store) {
  std::string out;
  for (const auto& f : store.folders()) out += (out.empty() ? "'" : ", '") + f.string() + "'";
  return out;
}

enum class stage : std::uint8_t { saved, prefetched, loaded };

struct entry {
  std::uint64_t bytes = 0;
  stage at = stage::saved;
  std::optional<std::uint64_t> slot;  ///< offset in the host share, while the pinned copy is held
  device_event host_ready;            ///< after the last copy into or out of the slot
  std::optional<io::swap_extent> extent;
  std::uint64_t nvme_charge = 0;  ///< what `extent` takes of zoe.activations.nvme_bytes
  void* device = nullptr;         ///< prefetched or loaded
  device_event device_ready;      ///< after the prefetch's copy to `device`
  stream_view device_stream;      ///< where `device` is freed after the work queued: the prefetch's or the load's
};

}  // namespace

struct activation_store::impl {
  impl(device& d, allocators::pinned_host_resource& p, mover* m, activation_store_options o)
      : dev(d),
        pinned(p),
        movers(m),
        store(m != nullptr ? m->store() : nullptr),
        options(o),
        share(d, p, o.host_bytes) {
    // A stream of the host device is a thread: only a store that prefetches makes one.
    if (options.prefetch_bytes > 0) prefetch_stream = dev.create_stream();
    if (nvme_enabled()) {
      const std::uint64_t block = store->options().io.block_size;
      ZOE_EXPECTS(options.staging_bytes > 0 && options.staging_bytes % block == 0, "activation_store: staging_bytes ",
                  options.staging_bytes, " must be a positive multiple of the swap store's aio.block_size ", block);
    }
  }

  [[nodiscard]] bool nvme_enabled() const noexcept { return store != nullptr && options.nvme_bytes > 0; }

  entry& find(activation_id id, const char* what) {
    const auto it = entries.find(id);
    ZOE_EXPECTS(it != entries.end(), "activation_store::", what, ": activation ", id,
                " is unknown (never saved, freed, or cleared at the end of its micro-batch)");
    return it->second;
  }

  void save_to_host(entry& e, std::uint64_t slot, const void* src, stream_view stream) {
    try {
      dev.copy_async(share.at(slot), src, e.bytes, copy_kind::device_to_host, stream);
      e.host_ready = dev.create_event();
      dev.record(e.host_ready, stream);
    } catch (...) {
      // The copy may be queued: the slot waits for the stream.
      device_event after;
      try {
        after = dev.create_event();
        dev.record(after, stream);
      } catch (...) {
        dev.synchronize(stream);
      }
      share.give_back(slot, e.bytes, std::move(after));
      throw;
    }
    e.slot = slot;
  }

  std::span<std::byte> staging_span(std::size_t bytes) {
    if (!staging) {
      try {
        staging = pinned.allocate(static_cast<std::size_t>(options.staging_bytes));
      } catch (const memory_error& e) {
        throw memory_error(str("activation checkpoints: the pinned NVMe staging memory of ",
                               format_bytes(options.staging_bytes),
                               " (zoe.activations.nvme_bytes) was refused: ", e.what()));
      }
    }
    // The last copy through the staging memory must be done before it is written again.
    if (staging_used.valid()) dev.synchronize(staging_used);
    return staging.span().first(bytes);
  }

  // One piece of the staging memory to or from NVMe through the rank's mover, waited for. The
  // compute waits on every spill and every load: demand.
  void nvme(io::io_op op, const io::swap_extent& extent, std::uint64_t offset, std::span<std::byte> staged,
            activation_id id) {
    mover::piece piece;
    piece.priority = move_priority::demand;
    piece.buffer = staged;
    piece.bytes = staged.size();
    (op == io::io_op::read ? piece.read : piece.write) = mover::io_range{extent, offset};
    piece.what = str("activation ", id);
    movers->run(std::move(piece));
  }

  // Rethrows the current exception with what it was doing in front, keeping its category.
  [[noreturn]] void rethrow_nvme(const char* doing, activation_id id, std::uint64_t bytes) const {
    carried_error failure = carried_error::of(std::current_exception());
    failure.message = str("activation checkpoints: ", doing, " activation ", id, " (", bytes,
                          " bytes) in the swap store at ", folders_of(*store), ": ", failure.message);
    failure.raise();
  }

  void save_to_nvme(entry& e, activation_id id, const void* src, stream_view stream) {
    const std::uint64_t block = store->options().io.block_size;
    const std::optional<std::uint64_t> charge = extent_charge(e.bytes, block);
    // nvme_in_use never passes nvme_bytes: the room left is a difference that cannot wrap.
    ZOE_CHECK(charge && *charge <= options.nvme_bytes - nvme_in_use, memory_error,
              "activation checkpoints: activation ", id, " (", e.bytes, " bytes) fits neither the pinned host share (",
              format_bytes(share.in_use()), " of ", format_bytes(options.host_bytes),
              " in use, zoe.activations.host_bytes) nor the NVMe share (", format_bytes(nvme_in_use), " of ",
              format_bytes(options.nvme_bytes), " in use, zoe.activations.nvme_bytes); raise one of them");
    io::swap_extent extent;
    try {
      extent = store->allocate(e.bytes);
    } catch (const memory_error& m) {
      throw memory_error(str("activation checkpoints: the swap store has no room for activation ", id, " (", e.bytes,
                             " bytes) although the NVMe share (zoe.activations.nvme_bytes) allows it: ", m.what()));
    }
    try {
      const auto* from = static_cast<const std::byte*>(src);
      for (std::uint64_t offset = 0; offset < e.bytes;) {
        const auto n = static_cast<std::size_t>(std::min(options.staging_bytes, e.bytes - offset));
        const std::span<std::byte> piece = staging_span(n);
        if (!staging_used.valid()) staging_used = dev.create_event();
        dev.copy_async(piece.data(), from + offset, n, copy_kind::device_to_host, stream);
        dev.record(staging_used, stream);
        dev.synchronize(staging_used);
        nvme(io::io_op::write, extent, offset, piece, id);
        offset += n;
      }
    } catch (...) {
      store->free(extent);  // the mover's run() waited for its piece: nothing is in flight on it
      rethrow_nvme("writing", id, e.bytes);
    }
    e.extent = extent;
    e.nvme_charge = *charge;
    nvme_in_use += *charge;
    const std::lock_guard lock(stats_mutex);
    stats.bytes_to_host += e.bytes;
    stats.bytes_written += e.bytes;
    stats.peak_nvme_bytes = std::max(stats.peak_nvme_bytes, nvme_in_use);
  }

  void load_from_nvme(entry& e, activation_id id, void* dst, stream_view stream) {
    const auto start = std::chrono::steady_clock::now();
    try {
      auto* to = static_cast<std::byte*>(dst);
      for (std::uint64_t offset = 0; offset < e.bytes;) {
        const auto n = static_cast<std::size_t>(std::min(options.staging_bytes, e.bytes - offset));
        const std::span<std::byte> piece = staging_span(n);
        // Checksums are verified before run() returns: a corrupt chunk throws corruption_error.
        nvme(io::io_op::read, *e.extent, offset, piece, id);
        if (!staging_used.valid()) staging_used = dev.create_event();
        dev.copy_async(to + offset, piece.data(), n, copy_kind::host_to_device, stream);
        dev.record(staging_used, stream);
        offset += n;
      }
    } catch (...) {
      rethrow_nvme("reading", id, e.bytes);
    }
    drop_extent(e);
    const std::lock_guard lock(stats_mutex);
    stats.bytes_read += e.bytes;
    stats.bytes_to_device += e.bytes;
    stats.load_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // Queues the copy of `e`'s pinned copy to `dst` on `stream`; the slot's last use is then that
  // copy (host_ready is recorded after it).
  void copy_from_host(entry& e, void* dst, stream_view stream) {
    dev.wait(stream, e.host_ready);
    dev.copy_async(dst, share.at(*e.slot), e.bytes, copy_kind::host_to_device, stream);
    dev.record(e.host_ready, stream);
    const std::lock_guard lock(stats_mutex);
    stats.bytes_to_device += e.bytes;
  }

  // The pinned copy is not needed once the device copy is loaded: the slot goes back after the
  // copy that read it.
  void give_back_slot(entry& e) {
    if (!e.slot) return;
    share.give_back(*e.slot, e.bytes, std::move(e.host_ready));
    e.slot.reset();
  }

  // Device memory for a load: the device budget comes first for the caller, so prefetched
  // activations give theirs back (those loaded last first) until the allocation fits. A free on a
  // stream returns its memory only once the work queued before it is done: before giving up, wait
  // for the prefetch stream and the caller's, so frees still queued there count.
  void* allocate_for_load(activation_id id, std::uint64_t bytes, stream_view stream) {
    bool waited = false;
    for (;;) {
      try {
        return dev.allocate(static_cast<std::size_t>(bytes), stream);
      } catch (const memory_error&) {
        const auto victim = std::find_if(entries.begin(), entries.end(), [id](const auto& kv) {
          return kv.first != id && kv.second.at == stage::prefetched;
        });
        if (victim != entries.end()) {
          entry& v = victim->second;
          dev.deallocate(v.device, static_cast<std::size_t>(v.bytes), v.device_stream);
          v.device = nullptr;
          v.at = stage::saved;
          prefetched_bytes -= v.bytes;
          continue;
        }
        if (waited) throw;
        if (options.prefetch_bytes > 0) dev.synchronize(prefetch_stream.view());
        dev.synchronize(stream);
        waited = true;
      }
    }
  }

  void drop_extent(entry& e) {
    if (!e.extent) return;
    store->free(*e.extent);
    nvme_in_use -= e.nvme_charge;
    e.extent.reset();
  }

  // Brings back the activations saved before `id` that are in pinned memory, latest first, while
  // the prefetched bytes stay within the device share.
  void prefetch_before(activation_id id) {
    if (options.prefetch_bytes == 0) return;
    for (auto it = std::make_reverse_iterator(entries.lower_bound(id)); it != entries.rend(); ++it) {
      entry& e = it->second;
      if (e.at != stage::saved || !e.slot) continue;                    // already back, or on NVMe (read when loaded)
      if (e.bytes > options.prefetch_bytes - prefetched_bytes) return;  // prefetched_bytes stays within it
      const stream_view s = prefetch_stream.view();
      void* dst = nullptr;
      try {
        dst = dev.allocate(static_cast<std::size_t>(e.bytes), s);
      } catch (const memory_error&) {
        return;  // the device budget is the caller's first: prefetch waits for a later load
      }
      try {
        copy_from_host(e, dst, s);
        if (!e.device_ready.valid()) e.device_ready = dev.create_event();
        dev.record(e.device_ready, s);
      } catch (...) {
        dev.deallocate(dst, static_cast<std::size_t>(e.bytes), s);
        throw;
      }
      e.device = dst;
      e.device_stream = s;
      e.at = stage::prefetched;
      prefetched_bytes += e.bytes;
    }
  }

  // Gives back everything `e` holds; a loaded entry's device memory after the work on `stream`.
  void release(entry& e, stream_view stream) noexcept {
    if (e.device != nullptr) {
      dev.deallocate(e.device, static_cast<std::size_t>(e.bytes), e.at == stage::loaded ? stream : e.device_stream);
      if (e.at == stage::prefetched) prefetched_bytes -= e.bytes;
      e.device = nullptr;
    }
    give_back_slot(e);
    try {
      drop_extent(e);
    } catch (const std::exception& x) {
      log::error("activation checkpoints: freeing an NVMe extent failed: ", x.what());
    }
  }

  void note_host_peak() {
    const std::lock_guard lock(stats_mutex);
    stats.peak_host_bytes = std::max(stats.peak_host_bytes, share.in_use());
  }

  device& dev;
  allocators::pinned_host_resource& pinned;
  mover* movers;
  io::swap_store* store;  ///< the mover's
  activation_store_options options;
  detail::host_share share;
  allocators::pinned_buffer staging;
  device_event staging_used;  ///< after the last device copy from or to the staging memory
  device_stream prefetch_stream;
  std::map<activation_id, entry> entries;  ///< by id: the order of the saves
  activation_id next_id = 1;
  std::uint64_t nvme_in_use = 0;
  std::uint64_t prefetched_bytes = 0;

  mutable std::mutex stats_mutex;
  activation_stats stats;
};

activation_store::activation_store(device& dev, allocators::pinned_host_resource& pinned, mover* movers,
                                   activation_store_options options)
    : impl_(std::make_unique<impl>(dev, pinned, movers, options)) {}

activation_store::~activation_store() {
  clear();
  impl_->share.drain();
  if (impl_->staging_used.valid()) {
    try {
      impl_->dev.synchronize(impl_->staging_used);
    } catch (const std::exception& e) {
      log::error("activation checkpoints: waiting for the staging copies failed: ", e.what());
    }
  }
}

activation_id activation_store::save(const void* src, std::size_t bytes, stream_view stream) {
  ZOE_EXPECTS(src != nullptr, "activation_store::save: the device buffer is null");
  ZOE_EXPECTS(bytes > 0, "activation_store::save: zero bytes (the buffer at ", src, ")");
  impl& s = *impl_;
  const activation_id id = s.next_id;
  entry e;
  e.bytes = bytes;
  if (const std::optional<std::uint64_t> slot = s.share.take(bytes)) {
    s.save_to_host(e, *slot, src, stream);
    s.note_host_peak();
    const std::lock_guard lock(s.stats_mutex);
    s.stats.bytes_to_host += bytes;
  } else if (s.nvme_enabled()) {
    s.save_to_nvme(e, id, src, stream);
  } else {
    throw memory_error(
        str("activation checkpoints: activation ", id, " (", bytes, " bytes) does not fit the pinned host share (",
            format_bytes(s.share.in_use()), " of ", format_bytes(s.options.host_bytes),
            " in use); raise zoe.activations.host_bytes",
            s.store != nullptr ? ", or give activations NVMe room with zoe.activations.nvme_bytes" : ""));
  }
  s.entries.emplace(id, std::move(e));
  ++s.next_id;
  const std::lock_guard lock(s.stats_mutex);
  ++s.stats.saves;
  return id;
}

void* activation_store::load(activation_id id, stream_view stream) {
  impl& s = *impl_;
  entry& e = s.find(id, "load");
  ZOE_EXPECTS(e.at != stage::loaded, "activation_store::load: activation ", id,
              " is already loaded (free it before loading it again)");
  if (e.at == stage::prefetched) {
    s.dev.wait(stream, e.device_ready);
    s.prefetched_bytes -= e.bytes;
    const std::lock_guard lock(s.stats_mutex);
    ++s.stats.prefetch_hits;
  } else {
    void* dst = s.allocate_for_load(id, e.bytes, stream);
    try {
      if (e.slot) {
        s.copy_from_host(e, dst, stream);
      } else {
        s.load_from_nvme(e, id, dst, stream);
      }
    } catch (...) {
      s.dev.deallocate(dst, static_cast<std::size_t>(e.bytes), stream);
      throw;
    }
    e.device = dst;
  }
  s.give_back_slot(e);
  e.at = stage::loaded;
  e.device_stream = stream;
  {
    const std::lock_guard lock(s.stats_mutex);
    ++s.stats.loads;
  }
  s.prefetch_before(id);
  return e.device;
}

void activation_store::free(activation_id id, stream_view stream) {
  impl& s = *impl_;
  entry& e = s.find(id, "free");
  s.release(e, stream);
  s.entries.erase(id);
}

void activation_store::clear() noexcept {
  impl& s = *impl_;
  for (auto& [id, e] : s.entries) s.release(e, e.device_stream);
  s.entries.clear();
}

std::size_t activation_store::size() const { return impl_->entries.size(); }

activation_stats activation_store::stats() const {
  const std::lock_guard lock(impl_->stats_mutex);
  return impl_->stats;
}

}  // namespace zoe::engine
