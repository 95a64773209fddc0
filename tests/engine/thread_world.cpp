#include "thread_world.hpp"

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "rank_threads.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/pairwise_tree.hpp"

namespace zoe::testing {
namespace {

using engine::collective;
using engine::comm_stats;
using engine::communicator;

// What the ranks of one group share: their world ranks, a generation barrier that gives up after
// the timeout naming a rank that did not arrive, and each one's buffer in the collective under way.
class group_state {
 public:
  group_state(std::string name, std::vector<std::size_t> world_ranks, std::size_t ranks_per_node,
              std::chrono::milliseconds timeout)
      : name_(std::move(name)),
        world_ranks_(std::move(world_ranks)),
        ranks_per_node_(ranks_per_node),
        timeout_(timeout),
        arrived_at_(world_ranks_.size(), 0),
        posted_(world_ranks_.size()) {}

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::size_t size() const noexcept { return world_ranks_.size(); }
  [[nodiscard]] std::size_t node_of(std::size_t rank) const noexcept { return world_ranks_[rank] / ranks_per_node_; }

  /// Posts `rank`'s buffer for the collective under way (read by the others until the next meet).
  void post(std::size_t rank, const void* buffer) noexcept { posted_[rank] = buffer; }
  [[nodiscard]] const std::byte* posted(std::size_t rank) const noexcept {
    return static_cast<const std::byte*>(posted_[rank]);
  }

  /// Waits until every rank of the group arrived; comm_error naming one that did not.
  void meet(std::size_t rank) {
    std::unique_lock lock(mutex_);
    if (!aborted_.empty()) throw comm_error(aborted_);
    const std::uint64_t generation = meetings_;
    arrived_at_[rank] = generation + 1;
    if (++arrived_ == size()) {
      arrived_ = 0;
      ++meetings_;
      met_.notify_all();
      return;
    }
    if (met_.wait_for(lock, timeout_, [&] { return meetings_ != generation || !aborted_.empty(); })) {
      if (meetings_ != generation) return;
      throw comm_error(aborted_);
    }
    for (std::size_t r = 0; r < size(); ++r) {
      if (arrived_at_[r] != generation + 1) {
        throw comm_error(str("thread world (", name_, "): rank ", world_ranks_[r], " (node ", node_of(r),
                             ") did not arrive at a collective within ", timeout_.count(), " ms"));
      }
    }
    throw comm_error(str("thread world (", name_, "): a collective timed out"));  // unreachable: someone is late
  }

 public:
  /// Rank `rank` dropped a collective: every rank waiting or arriving later fails naming it.
  void abort(std::size_t rank, std::string_view reason) {
    const std::lock_guard lock(mutex_);
    if (!aborted_.empty()) return;
    aborted_ =
        str("thread world (", name_, "): rank ", world_ranks_[rank], " (node ", node_of(rank), ") aborted: ", reason);
    met_.notify_all();
  }

 private:
  std::string aborted_;
  std::string name_;
  std::vector<std::size_t> world_ranks_;
  std::size_t ranks_per_node_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable met_;
  std::size_t arrived_ = 0;
  std::uint64_t meetings_ = 0;
  std::vector<std::uint64_t> arrived_at_;  // the generation each rank last arrived at, plus one
  std::vector<const void*> posted_;
};

class thread_communicator final : public communicator {
 public:
  enum class kind { world, node_local, cross_node, hpz };

  thread_communicator(device* dev, std::shared_ptr<group_state> group, std::size_t rank, kind k)
      : dev_(dev), group_(std::move(group)), rank_(rank), kind_(k) {}

  void set_sub_groups(std::unique_ptr<communicator> local, std::unique_ptr<communicator> cross,
                      std::unique_ptr<communicator> hpz) {
    local_ = std::move(local);
    cross_ = std::move(cross);
    hpz_ = std::move(hpz);
  }

  [[nodiscard]] std::size_t rank() const noexcept override { return rank_; }
  [[nodiscard]] std::size_t size() const noexcept override { return group_->size(); }
  [[nodiscard]] std::string name() const override { return "threads (" + group_->name() + ")"; }

  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    exchange(send, stream, [&](std::size_t r, const std::byte* from) {
      auto* const to = static_cast<std::byte*>(recv) + r * bytes;
      if (from != to) {
        std::memcpy(to, from, bytes);
      }
    });
    count(collective::all_gather, bytes);
  }

  void all_gather_coalesced(std::span<const engine::gather_part> /*parts*/, stream_view /*stream*/) override {
    unsupported("all_gather_coalesced");
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, engine::reduce_op op,
                      stream_view stream) override {
    const engine::reduce_part part{send, recv, count, type};
    reduce_scatter_coalesced(std::span(&part, 1), op, stream);
  }

  // One meeting for every part: each rank posts its parts, and every part is reduced as one
  // reduce_scatter reduces it: the ranks' blocks added in zoe's pairwise tree over the ranks, the
  // mean dividing the sum, as the mpi backend reduces (tree_order_reduce.hpp).
  void reduce_scatter_coalesced(std::span<const engine::reduce_part> parts, engine::reduce_op op,
                                stream_view stream) override {
    std::uint64_t bytes = 0;
    for (const engine::reduce_part& part : parts) {
      ZOE_EXPECTS(part.type == kernels::dtype::fp32, "thread world: reduce_scatter of fp32 only");
      bytes += part.count * sizeof(float);
    }
    // blocks[k][r]: rank r's block of part k for this rank.
    std::vector<std::vector<std::vector<float>>> blocks(parts.size(), std::vector<std::vector<float>>(size()));
    exchange(parts.data(), stream, [&](std::size_t r, const std::byte* from) {
      const auto* const theirs = reinterpret_cast<const engine::reduce_part*>(from);
      for (std::size_t k = 0; k < parts.size(); ++k) {
        const auto* const block = static_cast<const float*>(theirs[k].send) + rank_ * parts[k].count;
        blocks[k][r].assign(block, block + parts[k].count);
      }
    });
    for (std::size_t k = 0; k < parts.size(); ++k) {
      finish_block(reduce_in_tree(std::move(blocks[k])), parts[k].recv, op);
    }
    count(collective::reduce_scatter, bytes);
  }

  void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    exchange(send, stream, [&](std::size_t r, const std::byte* from) {
      std::memcpy(static_cast<std::byte*>(recv) + r * bytes, from + rank_ * bytes, bytes);
    });
    count(collective::all_to_all, bytes);
  }

  void all_reduce(const void* /*send*/, void* /*recv*/, std::size_t /*count*/, kernels::dtype /*type*/,
                  engine::reduce_op /*op*/, stream_view /*stream*/) override {
    unsupported("all_reduce");
  }

  void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view stream) override {
    ZOE_EXPECTS(root < size(), "thread world broadcast: root ", root, " of ", size());
    exchange(buffer, stream, [&](std::size_t r, const std::byte* from) {
      if (r == root && rank_ != root) {
        std::memcpy(buffer, from, bytes);
      }
    });
    count(collective::broadcast, bytes, root);
  }

  void point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to, stream_view stream) override {
    ZOE_EXPECTS(from < size() && to < size(), "thread world point_to_point: from ", from, " or to ", to, " of ",
                size());
    exchange(buffer, stream, [&](std::size_t r, const std::byte* source) {
      if (r == from && rank_ == to && from != to) {
        std::memcpy(buffer, source, bytes);
      }
    });
    count(collective::point_to_point, rank_ == from ? bytes : 0, to);
  }

  void barrier() override { group_->meet(rank_); }

  [[nodiscard]] communicator& node_local() override {
    if (kind_ == kind::world) {
      return *local_;
    }
    ZOE_EXPECTS(kind_ == kind::node_local, "thread world: the node-local group of a cross-node or hpZ group");
    return *this;
  }
  [[nodiscard]] communicator& cross_node() override {
    if (kind_ == kind::world) {
      return *cross_;
    }
    ZOE_EXPECTS(kind_ == kind::cross_node, "thread world: the cross-node group of a node-local or hpZ group");
    return *this;
  }
  [[nodiscard]] communicator& hpz() override {
    if (kind_ == kind::world) {
      return *hpz_;
    }
    ZOE_EXPECTS(kind_ == kind::hpz, "thread world: the hpZ group of a node-local or cross-node group");
    return *this;
  }

  [[nodiscard]] comm_stats stats() const override {
    const std::lock_guard lock(stats_mutex_);
    return stats_;
  }

  void abort(std::string_view reason) noexcept override {
    try {
      group_->abort(rank_, reason);
      if (kind_ == kind::world) {
        for (communicator* sub : {local_.get(), cross_.get(), hpz_.get()}) {
          if (sub != nullptr && sub != this) sub->abort(reason);
        }
      }
    } catch (...) {
      std::terminate();  // a test double: allocation failure here is not worth carrying
    }
  }

 private:
  [[noreturn]] static void unsupported(const char* what) {
    throw usage_error(str("thread world has no ", what,
                          " (only all_gather, all_to_all, fp32 reduce_scatter and its coalesced form, broadcast, "
                          "point_to_point, barrier)"));
  }

  // The ranks' blocks added in the pairwise tree over the ranks.
  [[nodiscard]] static std::vector<float> reduce_in_tree(std::vector<std::vector<float>>&& blocks) {
    return engine::pairwise_tree_sum<std::vector<float>>(
        blocks.size(), [&](std::size_t r) { return std::move(blocks[r]); },
        [](std::vector<float>& left, std::vector<float>&& right) {
          for (std::size_t i = 0; i < left.size(); ++i) {
            left[i] += right[i];
          }
        });
  }

  // Writes the reduction `op` of the summed blocks to `recv`: the mean divides the sum, as the mpi
  // backend does.
  void finish_block(std::vector<float>&& sum, void* recv, engine::reduce_op op) const {
    if (op == engine::reduce_op::mean) {
      for (float& v : sum) {
        v /= static_cast<float>(size());
      }
    }
    if (!sum.empty()) {
      std::memcpy(recv, sum.data(), sum.size() * sizeof(float));
    }
  }

  // Every rank posts its buffer; once all have, `copy(r, rank r's buffer)` runs for each rank r,
  // and the ranks meet again before anyone may reuse its buffers.
  template <class Copy>
  void exchange(const void* buffer, stream_view stream, const Copy& copy) {
    if (dev_ != nullptr) {
      dev_->synchronize(stream);  // the collective runs after the work queued before it
    }
    group_->post(rank_, buffer);
    group_->meet(rank_);
    for (std::size_t r = 0; r < size(); ++r) {
      copy(r, group_->posted(r));
    }
    group_->meet(rank_);
  }

  void count(collective what, std::uint64_t payload, std::size_t root = 0) {
    engine::traffic sent;
    for (std::size_t d = 0; d < size(); ++d) {
      const std::uint64_t b = engine::bytes_to(what, size(), rank_, d, payload, root);
      (group_->node_of(d) == group_->node_of(rank_) ? sent.intra_node : sent.inter_node) += b;
    }
    const std::lock_guard lock(stats_mutex_);
    stats_.of(what).intra_node += sent.intra_node;
    stats_.of(what).inter_node += sent.inter_node;
    ++stats_.calls;
  }

  device* dev_;
  std::shared_ptr<group_state> group_;
  std::size_t rank_;
  kind kind_;
  std::unique_ptr<communicator> local_;
  std::unique_ptr<communicator> cross_;
  std::unique_ptr<communicator> hpz_;
  mutable std::mutex stats_mutex_;
  comm_stats stats_;
};

}  // namespace

thread_world::thread_world(std::size_t size, thread_world_options options) {
  const std::size_t per_node = options.ranks_per_node == 0 ? size : options.ranks_per_node;
  ZOE_EXPECTS(size > 0 && per_node > 0 && size % per_node == 0, "thread world: ", per_node,
              " ranks per node do not divide ", size, " ranks");
  const std::size_t nodes = size / per_node;
  const auto group = [&](std::string name, std::vector<std::size_t> members) {
    return std::make_shared<group_state>(std::move(name), std::move(members), per_node, options.timeout);
  };
  std::vector<std::size_t> all(size);
  for (std::size_t r = 0; r < size; ++r) {
    all[r] = r;
  }
  const std::shared_ptr<group_state> world = group("world", all);
  std::vector<std::shared_ptr<group_state>> locals;
  std::vector<std::shared_ptr<group_state>> crosses;
  for (std::size_t n = 0; n < nodes; ++n) {
    std::vector<std::size_t> members;
    for (std::size_t l = 0; l < per_node; ++l) {
      members.push_back(n * per_node + l);
    }
    locals.push_back(group(str("node-local ", n), members));
  }
  for (std::size_t l = 0; l < per_node; ++l) {
    std::vector<std::size_t> members;
    for (std::size_t n = 0; n < nodes; ++n) {
      members.push_back(n * per_node + l);
    }
    crosses.push_back(group(str("cross-node ", l), members));
  }
  using kind = thread_communicator::kind;
  device* const dev = options.dev;
  for (std::size_t r = 0; r < size; ++r) {
    const std::size_t n = r / per_node;
    const std::size_t l = r % per_node;
    auto w = std::make_unique<thread_communicator>(dev, world, r, kind::world);
    w->set_sub_groups(std::make_unique<thread_communicator>(dev, locals[n], l, kind::node_local),
                      std::make_unique<thread_communicator>(dev, crosses[l], n, kind::cross_node),
                      // hpz_partition_size 1: the rank alone
                      std::make_unique<thread_communicator>(dev, group(str("hpz ", r), {r}), 0, kind::hpz));
    ranks_.push_back(std::move(w));
  }
}

thread_world::~thread_world() = default;

engine::communicator& thread_world::rank(std::size_t rank) { return *ranks_.at(rank); }
std::size_t thread_world::size() const noexcept { return ranks_.size(); }

void thread_world::run(const std::function<void(std::size_t)>& body) { run_rank_threads(size(), body); }

}  // namespace zoe::testing
