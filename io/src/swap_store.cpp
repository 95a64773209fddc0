#include "zoe/io/swap_store.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "extent_record.hpp"
#include "swap_directory.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"

namespace zoe::io {
namespace {
constexpr std::uint64_t extent_granularity = 4096;

swap_store_options validated(swap_store_options o) {
  ZOE_EXPECTS(!o.paths.empty(), "swap store needs at least one path");
  ZOE_EXPECTS(o.capacity > 0, "swap store capacity must be positive");
  // A power-of-two block_size (checked here) keeps every file's share of a whole number of
  // stripes a multiple of 4 KiB, and extents of a chunk or more alignable to a chunk.
  o.io.validate();
  ZOE_EXPECTS(o.folder_label.size() <= 64 && std::ranges::all_of(o.folder_label,
                                                                 [](char c) {
                                                                   return (c >= 'a' && c <= 'z') ||
                                                                          (c >= 'A' && c <= 'Z') ||
                                                                          (c >= '0' && c <= '9') || c == '-' ||
                                                                          c == '_';
                                                                 }),
              "swap store folder_label '", o.folder_label,
              "' must be at most 64 letters, digits, '-' or '_' (it becomes part of a folder name)");
  const std::uint64_t stripe = static_cast<std::uint64_t>(o.io.block_size) * o.paths.size();
  ZOE_EXPECTS(o.capacity <= std::numeric_limits<std::uint64_t>::max() - stripe, "swap store capacity ", o.capacity,
              " is too large");
  return o;
}

std::uint64_t stripe_bytes(const swap_store_options& o) {
  return static_cast<std::uint64_t>(o.io.block_size) * o.paths.size();
}
}  // namespace

swap_store::swap_store(swap_store_options options)
    : options_(validated(std::move(options))),
      // Not a power of two on 3, 5, 6 or 7 paths: round_up, never a mask.
      allocator_(round_up(options_.capacity, stripe_bytes(options_)), extent_granularity) {
  // "auto" probes the kernel and explains its choice: do that once, and build every engine of
  // every channel from the name it settled on.
  backend_ = make_backend(options_.engine, options_.io)->name();

  for (std::size_t i = 0; i < options_.paths.size(); ++i) {
    directories_.push_back(std::make_unique<detail::swap_directory>(options_.paths[i], options_.folder_label));
    files_.push_back(directories_.back()->create_swap_file(static_cast<int>(i), options_.direct));
    try {
      files_.back()->preallocate(file_bytes());
    } catch (const io_error& e) {
      throw io_error(str("swap path '", options_.paths[i].string(), "' cannot hold its ", format_bytes(file_bytes()),
                         " share of the swap store: ", e.what()),
                     e.os_errno());
    }
  }
  if (options_.prewrite) prewrite();
}

swap_store::~swap_store() = default;

void swap_store::prewrite() {
  // fallocate leaves unwritten extents on ext4, and the first write into them converts them in
  // the journal at about half speed. Writing once now keeps every later write an overwrite.
  const auto start = std::chrono::steady_clock::now();
  const std::size_t chunk = options_.io.block_size;
  const std::size_t depth = std::max<std::size_t>(1, std::min<std::size_t>(options_.io.queue_depth, 8));
  std::unique_ptr<std::byte, void (*)(void*)> zeros(static_cast<std::byte*>(std::aligned_alloc(4096, chunk)),
                                                    &std::free);
  ZOE_CHECK(zeros != nullptr, memory_error, "cannot allocate ", format_bytes(chunk), " to prepare the swap files");
  std::memset(zeros.get(), 0, chunk);
  std::vector<std::unique_ptr<io_engine>> engines;
  for (std::size_t i = 0; i < files_.size(); ++i) engines.push_back(make_engine());
  std::vector<io_completion> done;
  for (std::uint64_t at = 0; at < file_bytes(); at += chunk * depth) {
    for (std::size_t i = 0; i < files_.size(); ++i) {
      for (std::uint64_t o = at; o < std::min(file_bytes(), at + chunk * depth); o += chunk) {
        engines[i]->submit({io_op::write,
                            files_[i].get(),
                            {zeros.get(), static_cast<std::size_t>(std::min<std::uint64_t>(chunk, file_bytes() - o))},
                            o,
                            0});
      }
    }
    for (auto& e : engines) {
      done.clear();
      e->wait(done, e->outstanding());
      for (const auto& c : done) {
        if (!c.ok()) throw io_error(str("preparing the swap files failed: ", c.message), c.os_errno);
      }
    }
  }
  prewrite_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("swap store: wrote ", format_bytes(file_bytes() * files_.size()), " of swap files once in ",
            prewrite_seconds_, " s");
}

swap_extent swap_store::allocate(std::uint64_t bytes) {
  ZOE_EXPECTS(bytes > 0, "cannot allocate an empty swap extent");
  const std::unique_lock lock(mutex_);
  // Extents of a chunk or more start on a chunk boundary, so each chunk is one request to one file.
  const std::uint64_t alignment = bytes >= stripe_unit() ? stripe_unit() : extent_granularity;
  const auto offset = allocator_.allocate(bytes, alignment);
  if (!offset) {
    throw memory_error(str("swap store is full: cannot place ", format_bytes(bytes), " (free ",
                           format_bytes(allocator_.free_bytes()), ", largest hole ",
                           format_bytes(allocator_.largest_hole()), ", capacity ", format_bytes(allocator_.capacity()),
                           ")"));
  }
  const std::uint64_t id = next_id_++;
  extents_.emplace(id, std::make_shared<detail::extent_record>(id, *offset, bytes, stripe_unit()));
  return {id, bytes};
}

void swap_store::free(const swap_extent& extent) {
  const std::unique_lock lock(mutex_);
  const auto it = extents_.find(extent.id);
  ZOE_EXPECTS(it != extents_.end(), "swap extent ", extent.id, " is not allocated in this store");
  // Pins are raised under this lock's shared side, so none can appear while we hold it.
  ZOE_EXPECTS(it->second->in_flight.load() == 0, "swap extent ", extent.id, " still has ", it->second->in_flight.load(),
              " requests in flight");
  allocator_.free(it->second->offset, it->second->bytes);
  extents_.erase(it);
}

std::shared_ptr<detail::extent_record> swap_store::pin(const swap_extent& extent) const {
  const std::shared_lock lock(mutex_);
  const auto it = extents_.find(extent.id);
  ZOE_EXPECTS(it != extents_.end(), "swap extent ", extent.id, " is not allocated in this store");
  it->second->in_flight.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

std::unique_ptr<io_engine> swap_store::make_engine() const {
  auto backend = make_backend(backend_, options_.io);
  if (options_.wrap_backend) backend = options_.wrap_backend(std::move(backend));
  return std::make_unique<io_engine>(std::move(backend), options_.io);
}

std::uint64_t swap_store::capacity() const noexcept { return allocator_.capacity(); }

std::uint64_t swap_store::free_bytes() const {
  const std::shared_lock lock(mutex_);
  return allocator_.free_bytes();
}

bool swap_store::direct() const noexcept {
  for (const auto& f : files_) {
    if (!f->direct()) return false;
  }
  return true;
}

std::vector<std::filesystem::path> swap_store::folders() const {
  std::vector<std::filesystem::path> out;
  for (const auto& d : directories_) out.push_back(d->path());
  return out;
}

}  // namespace zoe::io
