#include "host_exchange.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rank_threads.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::testing {
namespace {

constexpr std::size_t not_a_member = std::numeric_limits<std::size_t>::max();

std::string list(const std::vector<std::size_t>& ranks) {
  std::string out = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += str(i == 0 ? "" : ", ", ranks[i]);
  return out + "]";
}

// What one member of a collective posts for the others to read.
struct post {
  std::string what;
  const void* in = nullptr;
  std::uint64_t size = 0;  // bytes, or fp32 elements for the reductions
  std::size_t root = 0;
  int op = 0;
};

struct group {
  std::vector<std::size_t> ranks;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<post> posts;  // by member
  std::size_t arrived = 0;
  std::uint64_t generation = 0;
  // The point-to-point mailbox: one message at a time.
  const void* message = nullptr;
  std::uint64_t message_bytes = 0;
  bool posted = false;
  bool taken = false;
};

struct handle {
  std::size_t id;
  std::size_t member;  // not_a_member outside the group
};

}  // namespace

struct host_exchange::state {
  std::size_t size;
  std::size_t ranks_per_node;
  std::chrono::milliseconds timeout;
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<group>> groups;  // by id: the order of every rank's create_group calls
  std::vector<std::size_t> created;            // per rank: its create_group calls so far
  std::map<std::pair<std::size_t, std::string>, std::size_t> counts;
  struct failure {
    std::string what;
    std::size_t nth;
    std::string message;
  };
  std::vector<failure> failures;
  std::size_t alive = 0;
};

namespace {

class rank_host final : public engine::host_collectives {
 public:
  rank_host(std::shared_ptr<host_exchange::state> s, std::size_t rank) : s_(std::move(s)), rank_(rank) {}

  [[nodiscard]] std::size_t rank() const noexcept override { return rank_; }
  [[nodiscard]] std::size_t world_size() const noexcept override { return s_->size; }
  [[nodiscard]] std::size_t ranks_per_node() const noexcept override { return s_->ranks_per_node; }

  group_handle create_group(std::span<const std::size_t> world_ranks) override {
    enter("create_group");
    const std::vector<std::size_t> ranks(world_ranks.begin(), world_ranks.end());
    const std::lock_guard lock(s_->mutex);
    const std::size_t id = s_->created[rank_]++;
    if (id == s_->groups.size()) {
      s_->groups.push_back(std::make_unique<group>());
      s_->groups.back()->ranks = ranks;
      s_->groups.back()->posts.resize(ranks.size());
    } else if (s_->groups[id]->ranks != ranks) {
      throw usage_error(str("host exchange: create_group #", id, ": world rank ", rank_, " asked for ", list(ranks),
                            ", an earlier rank for ", list(s_->groups[id]->ranks)));
    }
    const auto at = std::find(ranks.begin(), ranks.end(), rank_);
    ++s_->alive;
    return new handle{id, at == ranks.end() ? not_a_member : static_cast<std::size_t>(at - ranks.begin())};
  }

  void destroy_group(group_handle h) override {
    enter("destroy_group");
    delete static_cast<handle*>(h);
    const std::lock_guard lock(s_->mutex);
    --s_->alive;
  }

  void all_gather(group_handle h, const void* send, void* recv, std::size_t bytes, void* /*native*/) override {
    collective(h, {"all_gather", send, bytes}, recv, [](const std::vector<post>& posts, std::size_t /*me*/) {
      std::vector<std::byte> out;
      for (const post& p : posts) append(out, p.in, p.size);
      return out;
    });
  }

  void all_to_all(group_handle h, const void* send, void* recv, std::size_t bytes, void* /*native*/) override {
    collective(h, {"all_to_all", send, bytes}, recv, [](const std::vector<post>& posts, std::size_t me) {
      std::vector<std::byte> out;
      for (const post& p : posts) append(out, static_cast<const std::byte*>(p.in) + me * p.size, p.size);
      return out;
    });
  }

  void reduce_scatter(group_handle h, const void* send, void* recv, std::size_t count, kernels::dtype type,
                      engine::reduce_op op, void* /*native*/) override {
    expect_fp32(type, "reduce_scatter");
    collective(h, {"reduce_scatter", send, count, 0, static_cast<int>(op)}, recv,
               [](const std::vector<post>& posts, std::size_t me) { return reduce(posts, me * posts[me].size); });
  }

  void all_reduce(group_handle h, const void* send, void* recv, std::size_t count, kernels::dtype type,
                  engine::reduce_op op, void* /*native*/) override {
    expect_fp32(type, "all_reduce");
    collective(h, {"all_reduce", send, count, 0, static_cast<int>(op)}, recv,
               [](const std::vector<post>& posts, std::size_t /*me*/) { return reduce(posts, 0); });
  }

  void broadcast(group_handle h, void* buffer, std::size_t bytes, std::size_t root, void* /*native*/) override {
    collective(h, {"broadcast", buffer, bytes, root}, buffer, [](const std::vector<post>& posts, std::size_t) {
      std::vector<std::byte> out;
      append(out, posts[posts.front().root].in, posts.front().size);
      return out;
    });
  }

  void point_to_point(group_handle h, void* buffer, std::size_t bytes, std::size_t from, std::size_t to,
                      void* /*native*/) override {
    enter("point_to_point");
    const std::size_t me = member(h, "point_to_point");
    group& g = group_of(h);
    std::unique_lock lock(g.mutex);
    const auto wait = [&](auto ready) {
      if (!g.cv.wait_for(lock, s_->timeout, ready)) {
        throw comm_error(str("host exchange: point_to_point on ", list(g.ranks), ": world rank ", rank_,
                             " waited too long for its peer"));
      }
    };
    if (me == from) {
      wait([&] { return !g.posted; });
      g.message = buffer;
      g.message_bytes = bytes;
      g.posted = true;
      g.taken = false;
      g.cv.notify_all();
      wait([&] { return g.taken; });
      g.posted = false;
      g.cv.notify_all();
    } else if (me == to) {
      wait([&] { return g.posted && !g.taken; });
      if (g.message_bytes != bytes) {
        throw usage_error(str("host exchange: point_to_point of ", bytes, " bytes met one of ", g.message_bytes));
      }
      std::memcpy(buffer, g.message, bytes);
      g.taken = true;
      g.cv.notify_all();
    } else {
      throw usage_error(str("host exchange: point_to_point called on world rank ", rank_, ", neither from nor to"));
    }
  }

  void barrier(group_handle h) override {
    enter("barrier");
    const std::size_t me = member(h, "barrier");
    group& g = group_of(h);
    g.posts[me] = {"barrier"};
    arrive(g);
  }

 private:
  static void append(std::vector<std::byte>& out, const void* from, std::uint64_t bytes) {
    const auto* b = static_cast<const std::byte*>(from);
    out.insert(out.end(), b, b + bytes);
  }

  // Element k of the result: the members' elements first + k added in rank order (mean: / size).
  static std::vector<std::byte> reduce(const std::vector<post>& posts, std::uint64_t first) {
    std::vector<float> sum(posts.front().size, 0.0F);
    for (const post& p : posts) {
      const auto* in = static_cast<const float*>(p.in) + first;
      for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += in[k];
    }
    if (posts.front().op == static_cast<int>(engine::reduce_op::mean)) {
      for (float& v : sum) v /= static_cast<float>(posts.size());
    }
    std::vector<std::byte> out(sum.size() * sizeof(float));
    if (!out.empty()) std::memcpy(out.data(), sum.data(), out.size());
    return out;
  }

  static void expect_fp32(kernels::dtype type, std::string_view what) {
    if (type != kernels::dtype::fp32) throw usage_error(str("host exchange: ", what, " reduces fp32 only"));
  }

  // Counts the call; throws an injected failure.
  void enter(const std::string& what) {
    const std::lock_guard lock(s_->mutex);
    const std::size_t nth = s_->counts[{rank_, what}]++;
    for (const auto& f : s_->failures) {
      if (f.what == what && f.nth == nth) throw comm_error(f.message);
    }
  }

  group& group_of(group_handle h) {
    const std::lock_guard lock(s_->mutex);
    return *s_->groups[static_cast<handle*>(h)->id];
  }

  std::size_t member(group_handle h, std::string_view what) const {
    const std::size_t m = static_cast<handle*>(h)->member;
    if (m == not_a_member)
      throw usage_error(str("host exchange: ", what, " on a group world rank ", rank_, " is not in"));
    return m;
  }

  void arrive(group& g) {
    std::unique_lock lock(g.mutex);
    const std::uint64_t generation = g.generation;
    if (++g.arrived == g.ranks.size()) {
      g.arrived = 0;
      ++g.generation;
      g.cv.notify_all();
      return;
    }
    if (!g.cv.wait_for(lock, s_->timeout, [&] { return g.generation != generation; })) {
      throw comm_error(str("host exchange: world rank ", rank_, " waited too long for the others of ", list(g.ranks)));
    }
  }

  template <typename Compute>
  void collective(group_handle h, post mine, void* recv, Compute compute) {
    enter(mine.what);
    const std::size_t me = member(h, mine.what);
    group& g = group_of(h);
    g.posts[me] = mine;
    arrive(g);
    for (const post& p : g.posts) {
      if (p.what != mine.what || p.size != mine.size || p.root != mine.root || p.op != mine.op) {
        throw usage_error(str("host exchange: world rank ", rank_, " issued ", mine.what, " of ", mine.size,
                              " and a peer ", p.what, " of ", p.size));
      }
    }
    const std::vector<std::byte> out = compute(g.posts, me);
    arrive(g);  // everyone has read: outputs may overwrite inputs
    if (!out.empty()) std::memcpy(recv, out.data(), out.size());
  }

  std::shared_ptr<host_exchange::state> s_;
  std::size_t rank_;
};

}  // namespace

host_exchange::host_exchange(std::size_t size, std::size_t ranks_per_node, std::chrono::milliseconds timeout)
    : state_(std::make_shared<state>()) {
  state_->size = size;
  state_->ranks_per_node = ranks_per_node;
  state_->timeout = timeout;
  state_->created.assign(size, 0);
  for (std::size_t r = 0; r < size; ++r) ranks_.push_back(std::make_shared<rank_host>(state_, r));
}

host_exchange::~host_exchange() = default;

std::size_t host_exchange::size() const noexcept { return state_->size; }

std::shared_ptr<engine::host_collectives> host_exchange::rank(std::size_t rank) { return ranks_.at(rank); }

void host_exchange::fail_call(std::string what, std::size_t nth, std::string message) {
  const std::lock_guard lock(state_->mutex);
  state_->failures.push_back({std::move(what), nth, std::move(message)});
}

std::size_t host_exchange::calls(std::size_t rank, std::string_view what) const {
  const std::lock_guard lock(state_->mutex);
  const auto it = state_->counts.find({rank, std::string(what)});
  return it == state_->counts.end() ? 0 : it->second;
}

std::size_t host_exchange::groups_alive() const {
  const std::lock_guard lock(state_->mutex);
  return state_->alive;
}

void host_exchange::run(const std::function<void(std::size_t)>& body) { run_rank_threads(size(), body); }

}  // namespace zoe::testing
