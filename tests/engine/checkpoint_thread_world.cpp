#include "checkpoint_thread_world.hpp"

#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"

namespace zoe::testing {

// Every collective is two meetings: the ranks post their buffers and meet, each copies what it
// needs from the others' buffers, and they meet again so no buffer is reused while read.
struct thread_world::shared {
  explicit shared(std::size_t n, std::chrono::milliseconds t) : size(n), timeout(t), posted(n) {}

  /// Waits until every rank arrived at this meeting; comm_error naming a rank that did not.
  void meet(std::size_t rank) {
    std::unique_lock lock(mutex);
    const std::uint64_t generation = meetings;
    arrived_at[rank] = generation + 1;
    if (++arrived == size) {
      arrived = 0;
      ++meetings;
      changed.notify_all();
      return;
    }
    if (!changed.wait_for(lock, timeout, [&] { return meetings != generation; })) {
      for (std::size_t r = 0; r < size; ++r) {
        if (arrived_at[r] != generation + 1) {
          throw comm_error(str("thread_world: rank ", r, " did not arrive at a collective within the timeout"));
        }
      }
      throw comm_error("thread_world: a collective timed out");
    }
  }

  std::size_t size;
  std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t arrived = 0;
  std::uint64_t meetings = 0;
  std::vector<std::uint64_t> arrived_at = std::vector<std::uint64_t>(size, 0);
  std::vector<const void*> posted;  // each rank's buffer in the current collective
};

namespace {

class thread_communicator final : public engine::communicator {
 public:
  thread_communicator(std::shared_ptr<thread_world::shared> world, std::size_t rank)
      : world_(std::move(world)), rank_(rank) {}

  [[nodiscard]] std::size_t rank() const noexcept override { return rank_; }
  [[nodiscard]] std::size_t size() const noexcept override { return world_->size; }
  [[nodiscard]] std::string name() const override { return "thread world"; }

  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view /*stream*/) override {
    world_->posted[rank_] = send;
    world_->meet(rank_);
    for (std::size_t r = 0; r < size(); ++r) {
      auto* out = static_cast<std::byte*>(recv) + r * bytes;
      if (out != world_->posted[r]) std::memmove(out, world_->posted[r], bytes);
    }
    world_->meet(rank_);
  }
  void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view /*stream*/) override {
    ZOE_EXPECTS(root < size(), "thread_world broadcast: root ", root, " of ", size());
    world_->posted[rank_] = buffer;
    world_->meet(rank_);
    if (rank_ != root) std::memcpy(buffer, world_->posted[root], bytes);
    world_->meet(rank_);
  }
  void barrier() override { world_->meet(rank_); }

  void all_gather_coalesced(std::span<const engine::gather_part> /*parts*/, stream_view /*stream*/) override {
    unsupported("all_gather_coalesced");
  }
  void reduce_scatter(const void* /*send*/, void* /*recv*/, std::size_t /*count*/, kernels::dtype /*type*/,
                      engine::reduce_op /*op*/, stream_view /*stream*/) override {
    unsupported("reduce_scatter");
  }
  void all_to_all(const void* /*send*/, void* /*recv*/, std::size_t /*bytes*/, stream_view /*stream*/) override {
    unsupported("all_to_all");
  }
  void all_reduce(const void* /*send*/, void* /*recv*/, std::size_t /*count*/, kernels::dtype /*type*/,
                  engine::reduce_op /*op*/, stream_view /*stream*/) override {
    unsupported("all_reduce");
  }
  [[nodiscard]] engine::communicator& node_local() override { return *this; }
  [[nodiscard]] engine::communicator& cross_node() override { return *this; }
  [[nodiscard]] engine::communicator& hpz() override { return *this; }
  [[nodiscard]] engine::comm_stats stats() const override { return {}; }

 private:
  [[noreturn]] static void unsupported(const char* what) {
    throw usage_error(str("thread_world has no ", what, " (only broadcast, all_gather and barrier)"));
  }

  std::shared_ptr<thread_world::shared> world_;
  std::size_t rank_;
};

}  // namespace

thread_world::thread_world(std::size_t size, std::chrono::milliseconds timeout)
    : shared_(std::make_shared<shared>(size, timeout)) {
  for (std::size_t r = 0; r < size; ++r) ranks_.push_back(std::make_unique<thread_communicator>(shared_, r));
}

thread_world::~thread_world() = default;

engine::communicator& thread_world::rank(std::size_t rank) { return *ranks_.at(rank); }
std::size_t thread_world::size() const noexcept { return ranks_.size(); }

void thread_world::run(const std::function<void(std::size_t)>& body) {
  std::vector<std::exception_ptr> failures(size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < size(); ++r) {
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          failures[r] = std::current_exception();
        }
      });
    }
  }
  for (const std::exception_ptr& f : failures) {
    if (f) std::rethrow_exception(f);
  }
}

}  // namespace zoe::testing
