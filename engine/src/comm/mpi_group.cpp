// The collectives of one mpi group: argument checks and counting on the calling thread, the
// exchange as a host task in stream order.
#include "mpi_group.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

#include "mpi_runtime.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

constexpr std::size_t page_bytes = 4096;

}  // namespace

mpi_comm_owner::~mpi_comm_owner() {
  if (comm_ == MPI_COMM_NULL) return;
  const auto mpi = mpi_runtime::instance().serialize();
  // After MPI_Finalize (the application's, or ours at exit before a static's destructor) no MPI
  // call but a few queries is allowed; the handle is gone with MPI anyway.
  int finalized = 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized != 0) return;
  MPI_Comm_free(&comm_);
}

mpi_comm_owner& mpi_comm_owner::operator=(mpi_comm_owner&& o) noexcept {
  std::swap(comm_, o.comm_);
  return *this;
}

mpi_group::staging::staging(device& d, std::uint64_t bytes) : dev(&d) {
  rounded = (std::max<std::uint64_t>(bytes, 1) + page_bytes - 1) / page_bytes * page_bytes;
  data = static_cast<std::byte*>(std::aligned_alloc(page_bytes, rounded));  // NOLINT(cppcoreguidelines-no-malloc)
  if (data == nullptr) throw std::bad_alloc();
  if (d.kind() == device_kind::host) return;  // host "device" memory is host memory already
  try {
    registered = d.register_host(data, rounded);
  } catch (...) {
    std::free(data);  // NOLINT(cppcoreguidelines-no-malloc)
    throw;
  }
}

mpi_group::staging::~staging() {
  if (registered) dev->unregister_host(data, rounded);
  std::free(data);  // NOLINT(cppcoreguidelines-no-malloc)
}

mpi_group::mpi_group(device& dev, mpi_comm_owner comm, rank_group shape, std::chrono::milliseconds timeout,
                     mpi_group* world)
    : dev_(&dev),
      comm_(std::move(comm)),
      shape_(std::move(shape)),
      name_(str("mpi (", group_kind_name(shape_.kind), ")")),
      view_{comm_.get(), shape_.rank, &shape_.world_ranks, shape_.ranks_per_node, timeout},
      world_(world) {}

mpi_group::~mpi_group() {
  {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return in_flight_ == 0; });
  }
  release_retired();
  if (std::uncaught_exceptions() > 0) {
    mpi_runtime& rt = mpi_runtime::instance();
    rt.announce_failure(rt.world_rank(), str("an exception unwound past its ", name_, " communicator"));
  }
}

void mpi_group::abort(std::string_view reason) noexcept {
  mpi_runtime& rt = mpi_runtime::instance();
  mpi_group& world = world_ == nullptr ? *this : *world_;
  try {
    const std::string message = str(name_, " aborted by world rank ", rt.world_rank(), ": ", reason);
    for (mpi_group* g : {&world, world.node_local_.get(), world.cross_node_.get(), world.hpz_.get()}) {
      if (g == nullptr) continue;
      const std::lock_guard lock(g->mutex_);
      if (g->failure_.empty()) g->failure_ = message;  // run() refuses every later exchange
    }
    // The peers skip MPI_Finalize on this notice (this rank left them out of step), so this one must too.
    rt.record_failure();
    rt.announce_failure(rt.world_rank(), message);
  } catch (...) {
    rt.record_failure();
    rt.announce_failure(rt.world_rank(), "aborted");
  }
}

void mpi_group::adopt(std::unique_ptr<mpi_group> node_local, std::unique_ptr<mpi_group> cross_node,
                      std::unique_ptr<mpi_group> hpz) {
  node_local_ = std::move(node_local);
  cross_node_ = std::move(cross_node);
  hpz_ = std::move(hpz);
}

int mpi_group::next_tag(std::uint64_t kind) noexcept {
  // The kind is in the tag too: a rank that skipped a collective then issues another kind under the
  // tag the others use for the skipped one, and its messages must not match theirs.
  const auto span = static_cast<std::uint64_t>(mpi_runtime::instance().tag_upper_bound()) + 1;
  return static_cast<int>((sequence_++ * tag_kinds + kind) % span);
}

std::shared_ptr<mpi_group::staging> mpi_group::stage(std::uint64_t bytes) {
  release_retired();
  return std::make_shared<staging>(*dev_, bytes);
}

void mpi_group::retire(std::shared_ptr<staging> s) noexcept {
  const std::lock_guard lock(mutex_);
  try {
    retired_.push_back(std::move(s));
  } catch (...) {
    // Unregistering here would call into the device from a host task: leak it instead.
    log::error(name_, ": a staging buffer could not be kept for release; it leaks");
    new std::shared_ptr<staging>(std::move(s));  // NOLINT(cppcoreguidelines-owning-memory)
  }
}

void mpi_group::release_retired() noexcept {
  std::vector<std::shared_ptr<staging>> done;
  {
    const std::lock_guard lock(mutex_);
    done.swap(retired_);
  }
  // Destroyed here, on the issuing thread: unregistering calls into the device.
}

void mpi_group::task_done() noexcept {
  const std::lock_guard lock(mutex_);
  if (--in_flight_ == 0) idle_.notify_all();
}

void mpi_group::run(collective_call c, int tag, const std::function<void(mpi_exchange&)>& body) {
  {
    const std::lock_guard lock(mutex_);
    if (!failure_.empty()) {
      throw comm_error(str(describe(c), ": not run: an earlier collective of this group failed: ", failure_));
    }
  }
  mpi_exchange x(view_, tag, describe(c));
  try {
    body(x);
  } catch (const std::exception& e) {
    traffic_.add(c.what, x.handed());
    const std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = e.what();
    throw;
  }
  traffic_.add(c.what, x.handed());
}

copy_kind mpi_group::to_staging() const noexcept {
  return dev_->kind() == device_kind::host ? copy_kind::device_to_device : copy_kind::device_to_host;
}

copy_kind mpi_group::from_staging() const noexcept {
  return dev_->kind() == device_kind::host ? copy_kind::device_to_device : copy_kind::host_to_device;
}

void mpi_group::launch_staged(collective_call c, std::uint64_t tag_kind, stream_view stream, std::uint64_t bytes,
                              const std::function<void(std::byte*)>& copy_in,
                              std::function<void(mpi_exchange&, std::byte*)> exchange,
                              const std::function<void(std::byte*)>& copy_out) {
  std::shared_ptr<staging> s = stage(bytes);
  std::byte* const data = s->data;
  const int tag = next_tag(tag_kind);
  {
    const std::lock_guard lock(mutex_);
    ++in_flight_;
  }
  try {
    copy_in(data);
    dev_->launch_host(stream, [this, c, tag, data, exchange = std::move(exchange)] {
      run(c, tag, [&](mpi_exchange& x) { exchange(x, data); });
    });
    copy_out(data);
    dev_->launch_host(stream, [this, s = std::move(s)]() mutable {
      // The copies are done: hand the buffer to the issuing thread, which unregisters it.
      retire(std::move(s));
      task_done();
    });
  } catch (...) {
    task_done();
    throw;
  }
}

void mpi_group::launch(collective what, stream_view stream, const void* in, std::uint64_t in_bytes, void* out,
                       std::uint64_t out_bytes, exchange_fn fn) {
  const collective_call c = call(what);
  if (dev_->kind() != device_kind::host) {
    // Another device: through host staging, in stream order (copy out, exchange, copy back).
    launch_staged(
        c, static_cast<std::uint64_t>(what), stream, in_bytes + out_bytes,
        [&](std::byte* data) {
          if (in_bytes > 0) dev_->copy_async(data, in, in_bytes, to_staging(), stream);
        },
        [in_bytes, fn = std::move(fn)](mpi_exchange& x, std::byte* data) { fn(x, data, data + in_bytes); },
        [&](std::byte* data) {
          if (out_bytes > 0) dev_->copy_async(out, data + in_bytes, out_bytes, from_staging(), stream);
        });
    return;
  }
  const int tag = next_tag(static_cast<std::uint64_t>(what));
  {
    const std::lock_guard lock(mutex_);
    ++in_flight_;
  }
  try {
    // Device memory is host memory: MPI reads and writes the caller's buffers.
    dev_->launch_host(stream, [this, c, tag, in, out, fn = std::move(fn)] {
      struct done_guard {
        mpi_group* g;
        ~done_guard() { g->task_done(); }
      } guard{this};
      run(c, tag, [&](mpi_exchange& x) { fn(x, static_cast<const std::byte*>(in), static_cast<std::byte*>(out)); });
    });
  } catch (...) {
    task_done();
    throw;
  }
}

}  // namespace zoe::engine::detail
