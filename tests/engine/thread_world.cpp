#include "thread_world.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

using engine::collective;
using engine::comm_stats;
using engine::communicator;

// The ranks of one group meeting: each arrives and waits for the rest (a generation barrier that
// gives up after a minute, so a rank that failed early does not hang the others).
class meeting {
 public:
  explicit meeting(std::size_t size) : size_(size) {}
  void wait(const std::string& group) {
    std::unique_lock lock(mutex_);
    const std::size_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      met_.notify_all();
      return;
    }
    if (!met_.wait_for(lock, std::chrono::minutes(1), [&] { return generation_ != generation; })) {
      throw timeout_error("thread world: " + group + ": a rank did not arrive within a minute");
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable met_;
  std::size_t size_;
  std::size_t arrived_ = 0;
  std::size_t generation_ = 0;
};

// What the ranks of one group share: their world ranks, the meeting, and each one's buffers of the
// collective under way.
struct group_state {
  std::string name;
  std::vector<std::size_t> world_ranks;
  meeting meet;
  std::vector<const void*> sends;
  group_state(std::string n, std::vector<std::size_t> ranks)
      : name(std::move(n)), world_ranks(std::move(ranks)), meet(world_ranks.size()), sends(world_ranks.size()) {}
};

class thread_communicator final : public communicator {
 public:
  enum class kind { world, node_local, cross_node, hpz };

  thread_communicator(device& dev, std::shared_ptr<group_state> group, std::size_t rank, std::size_t ranks_per_node,
                      kind k)
      : dev_(&dev), group_(std::move(group)), rank_(rank), ranks_per_node_(ranks_per_node), kind_(k) {}

  void set_sub_groups(std::unique_ptr<communicator> local, std::unique_ptr<communicator> cross,
                      std::unique_ptr<communicator> hpz) {
    local_ = std::move(local);
    cross_ = std::move(cross);
    hpz_ = std::move(hpz);
  }

  [[nodiscard]] std::size_t rank() const noexcept override { return rank_; }
  [[nodiscard]] std::size_t size() const noexcept override { return group_->world_ranks.size(); }
  [[nodiscard]] std::string name() const override { return "threads (" + group_->name + ")"; }

  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    exchange(send, stream, [&](std::size_t r, const std::byte* from) {
      auto* const to = static_cast<std::byte*>(recv) + r * bytes;
      if (from != to) std::memcpy(to, from, bytes);
    });
    count(collective::all_gather, bytes);
  }

  void all_gather_coalesced(std::span<const engine::gather_part> /*parts*/, stream_view /*stream*/) override {
    throw usage_error("thread world: all_gather_coalesced is not modelled");
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, engine::reduce_op op,
                      stream_view stream) override {
    ZOE_EXPECTS(type == kernels::dtype::fp32, "thread world: reduce_scatter of fp32 only");
    std::vector<float> sum(count, 0.0F);
    exchange(send, stream, [&](std::size_t /*r*/, const std::byte* from) {
      const auto* const block = reinterpret_cast<const float*>(from) + rank_ * count;
      for (std::size_t i = 0; i < count; ++i) sum[i] += block[i];
    });
    const float scale = op == engine::reduce_op::mean ? 1.0F / static_cast<float>(size()) : 1.0F;
    for (float& v : sum) v *= scale;
    std::memcpy(recv, sum.data(), count * sizeof(float));
    this->count(collective::reduce_scatter, count * sizeof(float));
  }

  void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    exchange(send, stream, [&](std::size_t r, const std::byte* from) {
      std::memcpy(static_cast<std::byte*>(recv) + r * bytes, from + rank_ * bytes, bytes);
    });
    count(collective::all_to_all, bytes);
  }

  void all_reduce(const void* /*send*/, void* /*recv*/, std::size_t /*count*/, kernels::dtype /*type*/,
                  engine::reduce_op /*op*/, stream_view /*stream*/) override {
    throw usage_error("thread world: all_reduce is not modelled");
  }
  void broadcast(void* /*buffer*/, std::size_t /*bytes*/, std::size_t /*root*/, stream_view /*stream*/) override {
    throw usage_error("thread world: broadcast is not modelled");
  }
  void barrier() override { group_->meet.wait(group_->name); }

  [[nodiscard]] communicator& node_local() override {
    if (kind_ == kind::world) return *local_;
    ZOE_EXPECTS(kind_ == kind::node_local, "thread world: the node-local group of a cross-node or hpZ group");
    return *this;
  }
  [[nodiscard]] communicator& cross_node() override {
    if (kind_ == kind::world) return *cross_;
    ZOE_EXPECTS(kind_ == kind::cross_node, "thread world: the cross-node group of a node-local or hpZ group");
    return *this;
  }
  [[nodiscard]] communicator& hpz() override {
    if (kind_ == kind::world) return *hpz_;
    ZOE_EXPECTS(kind_ == kind::hpz, "thread world: the hpZ group of a node-local or cross-node group");
    return *this;
  }

  [[nodiscard]] comm_stats stats() const override {
    const std::lock_guard lock(stats_mutex_);
    return stats_;
  }

 private:
  // Every rank posts its send buffer; once all have, `copy(r, rank r's send)` runs for each rank
  // r, and the ranks meet again before anyone may reuse its buffers.
  template <class Copy>
  void exchange(const void* send, stream_view stream, const Copy& copy) {
    dev_->synchronize(stream);  // the collective runs after the work queued before it
    group_->sends[rank_] = send;
    group_->meet.wait(group_->name);
    for (std::size_t r = 0; r < size(); ++r) copy(r, static_cast<const std::byte*>(group_->sends[r]));
    group_->meet.wait(group_->name);
  }

  void count(collective what, std::uint64_t payload) {
    engine::traffic sent;
    const std::size_t my_node = group_->world_ranks[rank_] / ranks_per_node_;
    for (std::size_t d = 0; d < size(); ++d) {
      const std::uint64_t b = engine::bytes_to(what, size(), rank_, d, payload);
      (group_->world_ranks[d] / ranks_per_node_ == my_node ? sent.intra_node : sent.inter_node) += b;
    }
    const std::lock_guard lock(stats_mutex_);
    stats_.of(what).intra_node += sent.intra_node;
    stats_.of(what).inter_node += sent.inter_node;
    ++stats_.calls;
  }

  device* dev_;
  std::shared_ptr<group_state> group_;
  std::size_t rank_;
  std::size_t ranks_per_node_;
  kind kind_;
  std::unique_ptr<communicator> local_;
  std::unique_ptr<communicator> cross_;
  std::unique_ptr<communicator> hpz_;
  mutable std::mutex stats_mutex_;
  comm_stats stats_;
};

}  // namespace

std::vector<std::unique_ptr<communicator>> make_thread_world(device& dev, std::size_t ranks,
                                                             std::size_t ranks_per_node) {
  ZOE_EXPECTS(ranks > 0 && ranks_per_node > 0 && ranks % ranks_per_node == 0, "thread world: ", ranks_per_node,
              " ranks per node do not divide ", ranks, " ranks");
  const std::size_t nodes = ranks / ranks_per_node;
  std::vector<std::size_t> all(ranks);
  for (std::size_t r = 0; r < ranks; ++r) all[r] = r;
  const auto world = std::make_shared<group_state>("world", all);
  std::vector<std::shared_ptr<group_state>> locals;
  std::vector<std::shared_ptr<group_state>> crosses;
  for (std::size_t n = 0; n < nodes; ++n) {
    std::vector<std::size_t> members;
    for (std::size_t l = 0; l < ranks_per_node; ++l) members.push_back(n * ranks_per_node + l);
    locals.push_back(std::make_shared<group_state>("node-local " + std::to_string(n), members));
  }
  for (std::size_t l = 0; l < ranks_per_node; ++l) {
    std::vector<std::size_t> members;
    for (std::size_t n = 0; n < nodes; ++n) members.push_back(n * ranks_per_node + l);
    crosses.push_back(std::make_shared<group_state>("cross-node " + std::to_string(l), members));
  }
  using kind = thread_communicator::kind;
  std::vector<std::unique_ptr<communicator>> result;
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::size_t n = r / ranks_per_node;
    const std::size_t l = r % ranks_per_node;
    auto w = std::make_unique<thread_communicator>(dev, world, r, ranks_per_node, kind::world);
    w->set_sub_groups(std::make_unique<thread_communicator>(dev, locals[n], l, ranks_per_node, kind::node_local),
                      std::make_unique<thread_communicator>(dev, crosses[l], n, ranks_per_node, kind::cross_node),
                      // hpz_partition_size 1: the rank alone
                      std::make_unique<thread_communicator>(
                          dev, std::make_shared<group_state>("hpz " + std::to_string(r), std::vector<std::size_t>{r}),
                          0, ranks_per_node, kind::hpz));
    result.push_back(std::move(w));
  }
  return result;
}

void run_ranks(const std::vector<std::unique_ptr<communicator>>& world,
               const std::function<void(communicator&)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::string> failures(world.size());
  for (std::size_t r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*world[r]);
      } catch (const std::exception& e) {
        failures[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (std::size_t r = 0; r < world.size(); ++r) {
    EXPECT_EQ(failures[r], "") << "rank " << r << " of " << world.size() << " threw";
  }
}

}  // namespace zoe::testing
