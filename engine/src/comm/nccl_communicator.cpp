// The nccl backend (CUDA builds): the seam's collectives mapped onto NCCL, which is loaded at run time
// (nccl_library.hpp) and started through a bootstrap communicator (rank 0's unique id broadcast over
// it). NCCL's algorithms run out of sight, so traffic is counted by bytes_to()'s rule per destination
// (rank_group.hpp). NCCL never says which rank failed: a collective still running after
// comm_options::timeout, or one during which NCCL reports an asynchronous error, aborts its
// communicator and fails with a comm_error naming the group and its ranks, saying that NCCL cannot
// name the rank. Every message names this rank (its world rank), as the mpi backend's do.
//
// The CUDA runtime outside core/kernels (ARCHITECTURE.md keeps CUDA there): the watchdog's events
// go through the device seam (core/device.hpp), but NCCL needs the device it runs on made current
// on the calling thread (ncclCommInitRank takes the current device; its collectives are enqueued
// for it), and the seam neither exposes a device's CUDA ordinal nor selects a device for code
// outside it. So this file alone calls cudaDeviceGetByPCIBusId (the ordinal from the seam's
// pci_bus_id()) and cudaSetDevice; it is compiled only with ZOE_WITH_CUDA, like core's CUDA
// device. Moving these two calls behind the seam (a device::make_current()) would remove it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collective.hpp"
#include "nccl_backend.hpp"
#include "nccl_library.hpp"
#include "rank_group.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

// nccl_library.hpp declares NCCL's types without nccl.h; where the toolkit ships nccl.h, check them.
#if __has_include(<nccl.h>)
#include <nccl.h>

#include <type_traits>
namespace zoe::engine::detail::nccl {
static_assert(std::is_same_v<comm_t, ncclComm_t>);
static_assert(unique_id_bytes == NCCL_UNIQUE_ID_BYTES && sizeof(unique_id) == sizeof(ncclUniqueId));
static_assert(sizeof(result) == sizeof(ncclResult_t) && sizeof(data_type) == sizeof(ncclDataType_t) &&
              sizeof(red_op) == sizeof(ncclRedOp_t));
static_assert(static_cast<int>(result::success) == ncclSuccess &&
              static_cast<int>(result::unhandled_cuda_error) == ncclUnhandledCudaError &&
              static_cast<int>(result::system_error) == ncclSystemError &&
              static_cast<int>(result::internal_error) == ncclInternalError &&
              static_cast<int>(result::invalid_argument) == ncclInvalidArgument &&
              static_cast<int>(result::invalid_usage) == ncclInvalidUsage &&
              static_cast<int>(result::remote_error) == ncclRemoteError &&
              static_cast<int>(result::in_progress) == ncclInProgress);
static_assert(static_cast<int>(data_type::uint8) == ncclUint8 && static_cast<int>(data_type::float16) == ncclFloat16 &&
              static_cast<int>(data_type::float32) == ncclFloat32 &&
              static_cast<int>(data_type::bfloat16) == ncclBfloat16);
static_assert(static_cast<int>(red_op::sum) == ncclSum && static_cast<int>(red_op::avg) == ncclAvg);
static_assert(split_nocolor == NCCL_SPLIT_NOCOLOR);
}  // namespace zoe::engine::detail::nccl
#endif

namespace zoe::engine::detail {
namespace {

using clock = std::chrono::steady_clock;

void check_cuda(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw device_error(str("CUDA: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// NCCL takes the cudaStream_t as the stream's native handle (nccl_library.hpp passes it as void*).
void* native(stream_view s) noexcept { return s.native(); }

bool ok(nccl::result r) noexcept { return r == nccl::result::success || r == nccl::result::in_progress; }

nccl::data_type nccl_type(kernels::dtype t) noexcept {
  switch (t) {
    case kernels::dtype::fp16: return nccl::data_type::float16;
    case kernels::dtype::bf16: return nccl::data_type::bfloat16;
    case kernels::dtype::fp32: break;
  }
  return nccl::data_type::float32;
}

nccl::red_op nccl_op(reduce_op op) noexcept { return op == reduce_op::mean ? nccl::red_op::avg : nccl::red_op::sum; }

int to_int(std::size_t v) noexcept { return static_cast<int>(v); }

// One NCCL communicator and its fate. Shared by the communicator object, the watchdog's entries and
// the host tasks that report a failure into their stream, which may outlive the communicator.
class group_state {
 public:
  group_state(const nccl::library& lib, nccl::comm_t comm, rank_group members)
      : lib_(&lib),
        comm_(comm),
        members_(std::move(members)),
        name_(str("nccl (", group_kind_name(members_.kind), ")")) {}
  group_state(const group_state&) = delete;
  group_state& operator=(const group_state&) = delete;
  ~group_state() = default;

  [[nodiscard]] const nccl::library& lib() const noexcept { return *lib_; }
  /// nullptr once aborted or destroyed.
  [[nodiscard]] nccl::comm_t comm() const noexcept { return comm_.load(std::memory_order_acquire); }
  [[nodiscard]] const rank_group& members() const noexcept { return members_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  /// Keeps the first failure; later calls are ignored.
  void fail(const std::string& message) {
    const std::lock_guard lock(mutex_);
    if (failed()) return;
    failure_ = message;
    failed_.store(true, std::memory_order_release);
  }
  /// Throws comm_error with the kept failure if there is one.
  void throw_if_failed() const {
    if (!failed()) return;
    const std::lock_guard lock(mutex_);
    throw comm_error(failure_);
  }
  /// NCCL's asynchronous error (success where none, or where the communicator is gone).
  [[nodiscard]] nccl::result async_error() {
    const std::lock_guard lock(mutex_);
    if (comm() == nullptr) return nccl::result::success;
    nccl::result r = nccl::result::success;
    const nccl::result q = lib_->entry().comm_get_async_error(comm(), &r);
    return ok(q) ? r : q;
  }
  /// Aborts the NCCL communicator (its kernels in flight return): once, after fail(). NCCL calls
  /// this rank is making on it elsewhere are not waited for (a hung one is what abort ends).
  void abort() noexcept {
    const std::lock_guard lock(mutex_);
    const nccl::comm_t comm = comm_.exchange(nullptr);
    if (comm == nullptr) return;
    const nccl::result r = lib_->entry().comm_abort(comm);
    if (!ok(r)) log::error(name_, ": ncclCommAbort failed: ", lib_->error_string(r));
  }
  /// Destroys a communicator that did not fail, after its work completed.
  void destroy() noexcept {
    const std::lock_guard lock(mutex_);
    const nccl::comm_t comm = comm_.exchange(nullptr);
    if (comm == nullptr) return;
    const nccl::result r = lib_->entry().comm_destroy(comm);
    if (!ok(r)) log::error(name_, ": ncclCommDestroy failed: ", lib_->error_string(r));
  }

 private:
  const nccl::library* lib_;
  std::atomic<nccl::comm_t> comm_;  // atomic: issuing threads read it while the watchdog aborts
  rank_group members_;
  std::string name_;
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  std::string failure_;
};

// Watches the collectives of one world (and its sub-groups) until they complete: an event recorded
// after each, polled on a thread of its own with NCCL's asynchronous error and the deadline. Sleeps
// when nothing is in flight.
class watchdog {
 public:
  watchdog(device& dev, std::chrono::milliseconds timeout)
      : dev_(&dev),
        timeout_(timeout),
        period_(std::clamp(timeout / 8, std::chrono::milliseconds(1), std::chrono::milliseconds(20))),
        thread_([this] { run(); }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  // Waits for what is in flight (each completes, or fails and is aborted at its deadline).
  ~watchdog() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  /// Records an event after the collective just queued on `stream` and watches it.
  void watch(const std::shared_ptr<group_state>& group, std::string what, stream_view stream) {
    device_event event;
    {
      const std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        event = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!event.valid()) event = dev_->create_event();
    dev_->record(event, stream);  // device_error naming CUDA's error; the event is freed with it
    {
      const std::lock_guard lock(mutex_);
      pending_.push_back({group, std::move(what), std::move(event), stream.native(), clock::now()});
    }
    wake_.notify_all();
  }

  /// Blocks until nothing is in flight.
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return pending_.empty(); });
  }

  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }

 private:
  struct entry {
    std::shared_ptr<group_state> group;
    std::string what;
    device_event event;
    const void* stream;
    clock::time_point since;  // issued, or when the collective before it on its stream completed
  };

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stop_, and nothing left
      std::vector<std::shared_ptr<group_state>> to_abort;
      poll(to_abort);
      if (pending_.empty()) idle_.notify_all();
      if (!to_abort.empty()) {
        lock.unlock();
        for (const auto& g : to_abort) g->abort();
        lock.lock();
        continue;
      }
      wake_.wait_for(lock, period_);
    }
  }

  // One look at every collective in flight; fails the groups whose collective failed or ran out
  // of time into `to_abort`. Called with mutex_ held.
  void poll(std::vector<std::shared_ptr<group_state>>& to_abort) {
    const clock::time_point now = clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      entry& e = *it;
      bool done = false;
      std::string device_failure;
      try {
        done = dev_->query(e.event);
      } catch (const std::exception& x) {
        device_failure = x.what();
      }
      if (done) {
        // The next collective on the same stream starts its wait now, not when it was queued
        // behind this one.
        const auto next =
            std::find_if(std::next(it), pending_.end(), [&](const entry& n) { return n.stream == e.stream; });
        if (next != pending_.end()) next->since = std::max(next->since, now);
        free_.push_back(std::move(e.event));
        it = pending_.erase(it);
        continue;
      }
      std::string failure;
      if (e.group->failed()) {
        // Aborted already: its kernels return; nothing more to learn from this one.
      } else if (!device_failure.empty()) {
        failure = str(e.what, ": the device reports ", device_failure);
      } else if (const nccl::result r = e.group->async_error(); !ok(r)) {
        failure = str(e.what, ": NCCL reports ", e.group->lib().error_string(r), " among ",
                      e.group->members().describe_members(),
                      "; NCCL does not say which rank failed (the mpi backend names it)");
      } else if (now - e.since >= timeout_) {
        failure = str(e.what, " did not complete within zoe.comm.timeout_s (",
                      std::chrono::duration<double>(timeout_).count(), " s): a rank of ",
                      e.group->members().describe_members(),
                      " did not take part or failed, and NCCL cannot say which (the mpi backend names it)");
      } else {
        ++it;
        continue;
      }
      if (!failure.empty()) {
        e.group->fail(str(failure, "; world rank ", e.group->members().world_rank(), " aborted ", e.group->name()));
        to_abort.push_back(e.group);
      }
      // The event completes once the aborted kernels return; destroying it now (with its entry) is allowed.
      it = pending_.erase(it);
    }
  }

  device* dev_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<entry> pending_;
  std::vector<device_event> free_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

class nccl_communicator;

// What a world and its sub-groups share.
struct world_context {
  world_context(device& d, int o, std::chrono::milliseconds timeout) : dev(&d), ordinal(o), dog(d, timeout) {}
  device* dev;
  int ordinal;
  watchdog dog;
  nccl_communicator* world = nullptr;
};

class nccl_communicator final : public communicator {
 public:
  /// A world: owns `ctx` and, through add(), its sub-groups.
  nccl_communicator(std::shared_ptr<world_context> ctx, std::shared_ptr<group_state> state)
      : ctx_(std::move(ctx)), state_(std::move(state)) {
    ctx_->world = this;
    groups_.fill(this);
  }
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  // The world waits for its groups' work to complete and destroys their NCCL communicators; one
  // destroyed while an exception unwinds aborts them at once instead (its peers then fail at their
  // timeout: NCCL cannot tell them).
  ~nccl_communicator() override {
    if (ctx_->world == this) shut_down();
    release_barrier();
  }

  [[nodiscard]] std::size_t rank() const noexcept override { return state_->members().rank; }
  [[nodiscard]] std::size_t size() const noexcept override { return state_->members().size(); }
  [[nodiscard]] std::string name() const override { return state_->name(); }

  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    const collective_call call{collective::all_gather, state_->name()};
    check_all_gather(call, {send, recv, bytes}, size(), rank());
    issue(call, stream, state_->members().sent(call.what, bytes), [&](const nccl::api& a, nccl::comm_t c) {
      return a.all_gather(send, recv, bytes, nccl::data_type::uint8, c, native(stream));
    });
  }

  // NCCL fuses the all-gathers of one ncclGroupStart/End into one launch: the parts travel together.
  void all_gather_coalesced(std::span<const gather_part> parts, stream_view stream) override {
    const collective_call call{collective::all_gather, state_->name()};
    std::uint64_t bytes = 0;
    for (const gather_part& p : parts) {
      check_all_gather(call, p, size(), rank());
      bytes += p.bytes;
    }
    issue(call, stream, state_->members().sent(call.what, bytes), [&](const nccl::api& a, nccl::comm_t c) {
      return grouped(a, [&] {
        for (const gather_part& p : parts) {
          const nccl::result r = a.all_gather(p.send, p.recv, p.bytes, nccl::data_type::uint8, c, native(stream));
          if (!ok(r)) return r;
        }
        return nccl::result::success;
      });
    });
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                      stream_view stream) override {
    const collective_call call{collective::reduce_scatter, state_->name()};
    const std::uint64_t bytes = check_reduce_scatter(call, {send, recv, count, type}, op, size(), rank());
    if (reduce_alone(call, std::array{reduce_part{send, recv, count, type}}, stream)) return;
    issue(call, stream, state_->members().sent(call.what, bytes), [&](const nccl::api& a, nccl::comm_t c) {
      return a.reduce_scatter(send, recv, count, nccl_type(type), nccl_op(op), c, native(stream));
    });
  }

  // As all_gather_coalesced: NCCL fuses the reduce-scatters of one ncclGroupStart/End into one
  // launch, each part reduced as reduce_scatter reduces it.
  void reduce_scatter_coalesced(std::span<const reduce_part> parts, reduce_op op, stream_view stream) override {
    const collective_call call{collective::reduce_scatter, state_->name()};
    std::uint64_t bytes = 0;
    for (const reduce_part& p : parts) bytes += check_reduce_scatter(call, p, op, size(), rank());
    if (reduce_alone(call, parts, stream)) return;
    issue(call, stream, state_->members().sent(call.what, bytes), [&](const nccl::api& a, nccl::comm_t c) {
      return grouped(a, [&] {
        for (const reduce_part& p : parts) {
          const nccl::result r =
              a.reduce_scatter(p.send, p.recv, p.count, nccl_type(p.type), nccl_op(op), c, native(stream));
          if (!ok(r)) return r;
        }
        return nccl::result::success;
      });
    });
  }

  void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    const collective_call call{collective::all_to_all, state_->name()};
    check_all_to_all(call, send, recv, bytes, size());
    issue(call, stream, state_->members().sent(call.what, bytes), [&](const nccl::api& a, nccl::comm_t c) {
      if (send == recv) return nccl::result::success;  // world size 1: the identity
      return grouped(a, [&] {
        for (std::size_t peer = 0; peer < size(); ++peer) {
          nccl::result r =
              a.send(offset(send, peer * bytes), bytes, nccl::data_type::uint8, to_int(peer), c, native(stream));
          if (ok(r)) {
            r = a.recv(offset(recv, peer * bytes), bytes, nccl::data_type::uint8, to_int(peer), c, native(stream));
          }
          if (!ok(r)) return r;
        }
        return nccl::result::success;
      });
    });
  }

  void all_reduce(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                  stream_view stream) override {
    const collective_call call{collective::all_reduce, state_->name()};
    const std::uint64_t bytes = check_all_reduce(call, send, recv, count, type, op);
    if (reduce_alone(call, std::array{reduce_part{send, recv, count, type}}, stream)) return;
    issue(call, stream, state_->members().sent(call.what, bytes, 0, kernels::dtype_size(type)),
          [&](const nccl::api& a, nccl::comm_t c) {
            return a.all_reduce(send, recv, count, nccl_type(type), nccl_op(op), c, native(stream));
          });
  }

  void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view stream) override {
    const collective_call call{collective::broadcast, state_->name()};
    ZOE_EXPECTS(root < size(), who(call), ": root ", root, " is not a rank of the group (size ", size(), ")");
    check_buffer(call, "broadcast", buffer, bytes);
    issue(call, stream, state_->members().sent(call.what, bytes, root), [&](const nccl::api& a, nccl::comm_t c) {
      return a.broadcast(buffer, buffer, bytes, nccl::data_type::uint8, to_int(root), c, native(stream));
    });
  }

  // ncclSend on `from`, ncclRecv on `to` (grouped, as NCCL wants a pair of point-to-point calls);
  // the other ranks issue an empty group, so every rank still counts and checks it in order.
  void point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to, stream_view stream) override {
    const collective_call call{collective::point_to_point, state_->name()};
    ZOE_EXPECTS(from < size() && to < size(), who(call), ": from ", from, " or to ", to,
                " is not a rank of the group (size ", size(), ")");
    const bool sends = rank() == from && from != to;
    const bool receives = rank() == to && from != to;
    if (sends || receives) check_buffer(call, "buffer", buffer, bytes);
    issue(call, stream, state_->members().sent(call.what, sends ? bytes : 0, to),
          [&](const nccl::api& a, nccl::comm_t c) {
            return grouped(a, [&] {
              if (sends) return a.send(buffer, bytes, nccl::data_type::uint8, to_int(to), c, native(stream));
              if (receives) return a.recv(buffer, bytes, nccl::data_type::uint8, to_int(from), c, native(stream));
              return nccl::result::success;
            });
          });
  }

  // A one-element all-reduce on a stream of its own, waited for on the host; a rank that never comes
  // makes the watchdog abort it at the timeout, and the wait returns with the comm_error.
  // ncclCommAbort on the world and its sub-groups: this rank's later calls fail, and the peers'
  // collectives with it fail through their watchdog's timeout.
  void abort(std::string_view reason) noexcept override {
    nccl_communicator* const world = ctx_->world;
    for (nccl_communicator* g : world->groups_) {
      if (g == nullptr) continue;
      try {
        g->state_->fail(str(g->name(), " aborted by world rank ", g->state_->members().world_rank(), ": ", reason));
      } catch (...) {
        g->state_->fail("aborted");
      }
      g->state_->abort();
    }
  }

  void barrier() override {
    if (!barrier_stream_.view().native()) {
      barrier_stream_ = ctx_->dev->create_stream();
      barrier_buffer_ = ctx_->dev->allocate(sizeof(float), barrier_stream_.view());
      ctx_->dev->memset_async(barrier_buffer_, 0, sizeof(float), barrier_stream_.view());
    }
    const stream_view s = barrier_stream_.view();
    // Carried as an uncounted all-reduce; messages call it a barrier.
    const collective_call call{collective::all_reduce, state_->name()};
    issue(
        call, s, {},
        [&](const nccl::api& a, nccl::comm_t c) {
          return a.all_reduce(barrier_buffer_, barrier_buffer_, 1, nccl::data_type::float32, nccl::red_op::sum, c,
                              native(s));
        },
        /*counted=*/false);
    try {
      ctx_->dev->synchronize(s);
    } catch (const device_error&) {
      state_->throw_if_failed();
      throw;
    }
  }

  [[nodiscard]] communicator& node_local() override { return sub_group(group_kind::node_local); }
  [[nodiscard]] communicator& cross_node() override { return sub_group(group_kind::cross_node); }
  [[nodiscard]] communicator& hpz() override { return sub_group(group_kind::hpz); }

  [[nodiscard]] comm_stats stats() const override { return traffic_.snapshot(); }

  [[nodiscard]] const std::shared_ptr<group_state>& state() const noexcept { return state_; }

  /// For the world: a sub-group it owns, of `kind`.
  nccl_communicator& add(group_kind kind, std::shared_ptr<group_state> state) {
    subs_.push_back(std::make_unique<nccl_communicator>(ctx_, std::move(state), sub_tag{}));
    use(kind, *subs_.back());
    return *subs_.back();
  }
  /// For the world: its sub-group of `kind` is `g` (the world itself, or another sub-group).
  void use(group_kind kind, nccl_communicator& g) noexcept { groups_[static_cast<std::size_t>(kind)] = &g; }

  struct sub_tag {};
  nccl_communicator(std::shared_ptr<world_context> ctx, std::shared_ptr<group_state> state, sub_tag /*sub*/)
      : ctx_(std::move(ctx)), state_(std::move(state)) {}

  // The barrier's buffer and stream, made on first use.
  void release_barrier() noexcept {
    if (barrier_buffer_ != nullptr) ctx_->dev->deallocate(barrier_buffer_, sizeof(float), barrier_stream_.view());
    barrier_buffer_ = nullptr;
    barrier_stream_ = device_stream();
  }

 private:
  static const void* offset(const void* p, std::uint64_t bytes) noexcept {
    return static_cast<const std::byte*>(p) + bytes;
  }
  static void* offset(void* p, std::uint64_t bytes) noexcept { return static_cast<std::byte*>(p) + bytes; }

  // A group of one reduces nothing: its reductions are copies (none in place), and NCCL is not
  // asked. Its one-rank ncclAvg out of place leaves the elements past the last multiple of four
  // unwritten (NCCL 2.28.3 and 2.28.9 on an H200: of 4097 floats the last stays as it was; sum, max
  // and in-place calls were right), and such groups are common: the world on one GPU, the
  // node-local group with one GPU per node, the cross-node group on one node.
  bool reduce_alone(const collective_call& call, std::span<const reduce_part> parts, stream_view stream) {
    if (size() != 1) return false;
    state_->throw_if_failed();
    for (const reduce_part& p : parts) {
      if (p.send == p.recv) continue;
      ctx_->dev->copy_async(p.recv, p.send, p.count * kernels::dtype_size(p.type), copy_kind::device_to_device, stream);
    }
    traffic_.count(call.what, {});
    return true;
  }

  // "all_gather on nccl (world) (world rank 2)": every message names this rank, as the mpi backend's do.
  [[nodiscard]] std::string who(const collective_call& call) const {
    return str(describe(call), " (world rank ", state_->members().world_rank(), ")");
  }

  template <typename Calls>
  static nccl::result grouped(const nccl::api& a, Calls&& calls) {
    nccl::result r = a.group_start();
    if (!ok(r)) return r;
    const nccl::result inner = calls();
    r = a.group_end();  // always closed, so a failed call does not leave the group open
    return ok(inner) ? r : inner;
  }

  // Queues one collective: refuses on a failed group, selects the device, calls NCCL, watches the
  // collective and queues a host task that reports a failure into the stream's next synchronize.
  template <typename Enqueue>
  void issue(const collective_call& call, stream_view stream, traffic sent, Enqueue&& enqueue, bool counted = true) {
    state_->throw_if_failed();
    check_cuda(cudaSetDevice(ctx_->ordinal), str("cudaSetDevice(", ctx_->ordinal, ") for ", who(call)));
    const nccl::comm_t comm = state_->comm();
    if (comm == nullptr) {  // aborted since the check above
      state_->throw_if_failed();
      throw comm_error(str(who(call), ": the communicator is shut down"));
    }
    const nccl::result r = enqueue(state_->lib().entry(), comm);
    if (!ok(r)) {
      const std::string message = str(who(call), ": NCCL refused it: ", state_->lib().error_string(r));
      // A bad argument leaves the communicator usable; any other refusal (a system, CUDA or remote
      // error) leaves it broken, and its peers must not wait on it for ever.
      if (r != nccl::result::invalid_argument && r != nccl::result::invalid_usage) {
        state_->fail(str(message, "; aborted ", state_->name()));
        state_->abort();
      }
      throw comm_error(message);
    }
    ctx_->dog.watch(
        state_,
        counted ? who(call) : str("barrier on ", state_->name(), " (world rank ", state_->members().world_rank(), ")"),
        stream);
    ctx_->dev->launch_host(stream, [state = state_] { state->throw_if_failed(); });
    if (counted) traffic_.count(call.what, sent);
  }

  communicator& sub_group(group_kind kind) {
    nccl_communicator* target = ctx_->world->groups_[static_cast<std::size_t>(kind)];
    if (this == ctx_->world) return *target;
    ZOE_EXPECTS(state_->members().within(target->state_->members()), name(), ": its ranks (",
                state_->members().describe_members(), ") do not lie within the ", group_kind_name(kind),
                " group; ask the world for it");
    return *this;
  }

  void shut_down() noexcept {
    std::vector<group_state*> all{state_.get()};
    for (const auto& g : subs_) all.push_back(g->state_.get());
    if (std::uncaught_exceptions() > 0) {
      for (group_state* g : all) {
        g->fail(str(g->name(), ": world rank ", g->members().world_rank(),
                    " failed and aborted it while an exception unwound"));
        g->abort();
      }
    }
    ctx_->dog.drain();
    for (auto it = all.rbegin(); it != all.rend(); ++it) (*it)->destroy();
  }

  std::shared_ptr<world_context> ctx_;
  std::shared_ptr<group_state> state_;
  std::array<nccl_communicator*, 4> groups_{};            // the world's: indexed by group_kind
  std::vector<std::unique_ptr<nccl_communicator>> subs_;  // the world's: the sub-groups it owns
  traffic_counter traffic_;
  device_stream barrier_stream_;
  void* barrier_buffer_ = nullptr;
};

void check_nccl(const nccl::library& lib, nccl::result r, const std::string& what, std::size_t world_rank) {
  if (!ok(r)) throw comm_error(str("nccl (world rank ", world_rank, "): ", what, " failed: ", lib.error_string(r)));
}

// Rank 0 of `bootstrap` makes a unique id and every rank receives it: through a small device
// buffer, since the seam's collectives take device memory.
nccl::unique_id share_unique_id(const nccl::library& lib, device& dev, communicator& bootstrap,
                                std::size_t world_rank) {
  nccl::unique_id id{};
  if (bootstrap.rank() == 0) check_nccl(lib, lib.entry().get_unique_id(&id), "ncclGetUniqueId", world_rank);
  if (bootstrap.size() == 1) return id;
  const device_stream stream = dev.create_stream();
  void* buffer = dev.allocate(sizeof id, stream.view());
  try {
    dev.copy_async(buffer, &id, sizeof id, copy_kind::host_to_device, stream.view());
    bootstrap.broadcast(buffer, sizeof id, 0, stream.view());
    dev.copy_async(&id, buffer, sizeof id, copy_kind::device_to_host, stream.view());
    dev.synchronize(stream.view());
  } catch (...) {
    dev.deallocate(buffer, sizeof id, stream.view());
    throw;
  }
  dev.deallocate(buffer, sizeof id, stream.view());
  return id;
}

nccl::comm_t init_rank(const nccl::library& lib, const nccl::unique_id& id, const rank_group& g) {
  nccl::comm_t comm = nullptr;
  check_nccl(lib, lib.entry().comm_init_rank(&comm, to_int(g.size()), id, to_int(g.rank)),
             str("ncclCommInitRank of the ", group_kind_name(g.kind), " group (", g.describe_members(), ")"),
             g.world_rank());
  return comm;
}

communicator& bootstrap_group(communicator& bootstrap, group_kind kind) {
  switch (kind) {
    case group_kind::node_local: return bootstrap.node_local();
    case group_kind::cross_node: return bootstrap.cross_node();
    case group_kind::hpz: return bootstrap.hpz();
    case group_kind::world: break;
  }
  return bootstrap;
}

}  // namespace

std::unique_ptr<communicator> make_nccl_communicator(device& dev, communicator& bootstrap,
                                                     const comm_options& options) {
  if (dev.kind() != device_kind::cuda) {
    throw config_error(str("zoe.comm.backend: nccl needs a CUDA device, and this world is on ", dev.name(),
                           " (choose the mpi or single backend, or the cuda device)"));
  }
  const nccl::library& lib = nccl::process_library();
  const std::optional<std::string> bus = dev.pci_bus_id();
  ZOE_EXPECTS(bus.has_value(), "nccl: ", dev.name(), " has no PCI bus id");
  int ordinal = 0;
  check_cuda(cudaDeviceGetByPCIBusId(&ordinal, bus->c_str()), str("cudaDeviceGetByPCIBusId(", *bus, ")"));
  check_cuda(cudaSetDevice(ordinal), str("cudaSetDevice(", ordinal, ")"));

  // The topology is the bootstrap's: it resolved zoe.ranks_per_node and the hpZ size already.
  const std::size_t world_size = bootstrap.size();
  const std::size_t world_rank = bootstrap.rank();
  const std::size_t ranks_per_node = bootstrap.node_local().size();
  const std::size_t hpz_size = bootstrap.hpz().size();

  auto ctx = std::make_shared<world_context>(dev, ordinal, options.timeout);
  rank_group world_members = make_rank_group(group_kind::world, world_size, world_rank, ranks_per_node, hpz_size);
  const nccl::comm_t world_comm = init_rank(lib, share_unique_id(lib, dev, bootstrap, world_rank), world_members);
  auto world = std::make_unique<nccl_communicator>(
      ctx, std::make_shared<group_state>(lib, world_comm, std::move(world_members)));

  // Every rank makes the sub-groups in the same order (a split, or a bootstrap broadcast, is
  // collective) and takes the same branches (group sizes are the same on every rank).
  std::vector<nccl_communicator*> made;
  for (const group_kind kind : {group_kind::node_local, group_kind::cross_node, group_kind::hpz}) {
    rank_group members = make_rank_group(kind, world_size, world_rank, ranks_per_node, hpz_size);
    nccl_communicator* same = members.size() == world_size ? world.get() : nullptr;
    for (nccl_communicator* g : made) {
      if (g->state()->members().world_ranks == members.world_ranks) same = g;
    }
    if (same != nullptr) {
      world->use(kind, *same);
      continue;
    }
    nccl::comm_t comm = nullptr;
    if (lib.has_split()) {
      // Colour: the group's first world rank, the same on each member and different between groups.
      check_nccl(lib,
                 lib.entry().comm_split(world->state()->comm(), to_int(members.world_ranks.front()), to_int(world_rank),
                                        &comm, nullptr),
                 str("ncclCommSplit into the ", group_kind_name(kind), " group (", members.describe_members(), ")"),
                 world_rank);
    } else {
      comm = init_rank(lib, share_unique_id(lib, dev, bootstrap_group(bootstrap, kind), world_rank), members);
    }
    made.push_back(&world->add(kind, std::make_shared<group_state>(lib, comm, std::move(members))));
  }
  log::info("nccl: world rank ", world_rank, " of ", world_size, " on ", dev.name(), " over NCCL ",
            lib.version_string(), " (", lib.path(), "), ", ranks_per_node, " ranks per node");
  return world;
}

}  // namespace zoe::engine::detail
