// The host backend (host_communicator.hpp): every collective checked and counted by bytes_to()'s
// rule, then handed to the host program's collectives (host_collectives.hpp) in the group's issue
// order, which is the only order the peers can agree on: a host such as torch.distributed matches
// collectives of one group by their sequence, with no tag to pair them otherwise.
#include "host_communicator.hpp"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "collective.hpp"
#include "rank_group.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/host_collectives.hpp"

namespace zoe::engine::detail {
namespace {

using handle = host_collectives::group_handle;
// One call to the host: the host, the group's handle and the native stream (null on the host device).
using host_call = std::function<void(host_collectives&, handle, void*)>;

const std::byte* offset(const void* p, std::uint64_t bytes) noexcept {
  return static_cast<const std::byte*>(p) + bytes;
}
std::byte* offset(void* p, std::uint64_t bytes) noexcept { return static_cast<std::byte*>(p) + bytes; }

// A copy a group of one rank makes instead of a collective.
struct local_copy {
  const void* from;
  void* to;
  std::uint64_t bytes;
};

// One group: its host handle, its members, the turns that keep its host calls in issue order, and
// its fate. Shared with the host tasks queued for it, which the world waits for before it goes.
class group_state {
 public:
  group_state(std::shared_ptr<host_collectives> host, handle h, rank_group members)
      : host_(std::move(host)),
        handle_(h),
        members_(std::move(members)),
        name_(str("host (", group_kind_name(members_.kind), ")")) {}

  [[nodiscard]] const rank_group& members() const noexcept { return members_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  /// Keeps the first failure; later calls are ignored.
  void fail(const std::string& message) {
    const std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = message;
  }
  /// Throws comm_error "<what>: not run: <the first failure>" once the group failed.
  void throw_if_failed(const std::string& what) const {
    const std::lock_guard lock(mutex_);
    if (!failure_.empty()) throw comm_error(str(what, ": not run: ", failure_));
  }

  /// Reserves the next turn in issue order; the caller then run()s or abandon()s it.
  [[nodiscard]] std::uint64_t take_turn() {
    const std::lock_guard lock(mutex_);
    ++in_flight_;
    return issued_++;
  }
  /// Waits for `turn`, then hands `body` the host unless the group failed. A failure (the host's,
  /// or the group's earlier one) fails the group and is thrown as a zoe::error of its category,
  /// "<what>: <message>". The turn ends either way.
  void run(std::uint64_t turn, const std::string& what, const host_call& body, void* native_stream) {
    {
      std::unique_lock lock(mutex_);
      turn_.wait(lock, [&] { return ran_ == turn || abandoned_; });
    }
    std::optional<error> failure;
    {
      const std::lock_guard lock(mutex_);
      if (!failure_.empty()) failure.emplace(error_category::comm, str(what, ": not run: ", failure_));
    }
    if (!failure) {
      try {
        body(*host_, handle_, native_stream);
      } catch (const error& e) {
        failure.emplace(e.category(), str(what, ": ", e.what()));
      } catch (const std::exception& e) {
        failure.emplace(error_category::comm, str(what, ": ", e.what()));
      }
      if (failure) fail(failure->what());
    }
    end_turn(false);
    if (failure) throw *failure;
  }
  /// A turn that will never run (its task was not queued): the later ones fail instead of waiting.
  void abandon(const std::string& message) noexcept {
    try {
      fail(message);
    } catch (...) {
      fail("a collective was not queued");
    }
    end_turn(true);
  }
  /// Blocks until no turn is in flight.
  void drain() {
    std::unique_lock lock(mutex_);
    turn_.wait(lock, [&] { return in_flight_ == 0; });
  }

  void destroy() noexcept {
    try {
      host_->destroy_group(handle_);
    } catch (const std::exception& e) {
      log::error(name_, " (world rank ", members_.world_rank(), "): destroy_group failed: ", e.what());
    }
  }

 private:
  void end_turn(bool abandoned) noexcept {
    {
      const std::lock_guard lock(mutex_);
      if (abandoned) {
        abandoned_ = true;
      } else {
        ++ran_;
      }
      --in_flight_;
    }
    turn_.notify_all();
  }

  std::shared_ptr<host_collectives> host_;
  handle handle_;
  rank_group members_;
  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable turn_;
  std::uint64_t issued_ = 0;   // turns handed out
  std::uint64_t ran_ = 0;      // turns finished
  std::size_t in_flight_ = 0;  // turns handed out and not finished
  bool abandoned_ = false;
  std::string failure_;
};

class host_communicator;

// What a world and its sub-groups share.
struct world_context {
  device* dev = nullptr;
  host_communicator* world = nullptr;
  // Every group create_group made, members' and others' alike, in the order made.
  std::vector<std::shared_ptr<group_state>> made;
};

class host_communicator final : public communicator {
 public:
  host_communicator(std::shared_ptr<world_context> ctx, std::shared_ptr<group_state> state)
      : ctx_(std::move(ctx)), state_(std::move(state)) {}
  host_communicator(const host_communicator&) = delete;
  host_communicator& operator=(const host_communicator&) = delete;
  ~host_communicator() override {
    if (ctx_->world == this) shut_down();
  }

  /// Makes this the world of its context; its sub-groups are itself until add() or use().
  void become_world() noexcept {
    ctx_->world = this;
    groups_.fill(this);
  }

  [[nodiscard]] std::size_t rank() const noexcept override { return state_->members().rank; }
  [[nodiscard]] std::size_t size() const noexcept override { return state_->members().size(); }
  [[nodiscard]] std::string name() const override { return state_->name(); }

  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    const collective_call call{collective::all_gather, state_->name()};
    check_all_gather(call, {send, recv, bytes}, size(), rank());
    const std::array alone{local_copy{send, recv, bytes}};
    issue(call, stream, state_->members().sent(call.what, bytes), alone,
          [=](host_collectives& h, handle g, void* native) { h.all_gather(g, send, recv, bytes, native); });
  }

  void all_gather_coalesced(std::span<const gather_part> parts, stream_view stream) override {
    const collective_call call{collective::all_gather, state_->name()};
    std::uint64_t packed = 0;
    std::vector<local_copy> alone;
    for (const gather_part& p : parts) {
      check_all_gather(call, p, size(), rank());
      packed += p.bytes;
      alone.push_back({p.send, p.recv, p.bytes});
    }
    const std::vector<gather_part> kept(parts.begin(), parts.end());
    const std::size_t n = size();
    host_call fn;
    if (on_host_device()) {
      // One call: the parts packed into one message per peer, as the mpi backend sends them.
      fn = [kept, packed, n](host_collectives& h, handle g, void* native) {
        std::vector<std::byte> staging(std::max<std::uint64_t>(1, packed * (n + 1)));
        std::byte* const pack = staging.data();
        std::byte* const gathered = pack + packed;
        std::uint64_t at = 0;
        for (const gather_part& p : kept) {
          if (p.bytes > 0) std::memcpy(pack + at, p.send, p.bytes);
          at += p.bytes;
        }
        h.all_gather(g, pack, gathered, packed, native);
        at = 0;
        for (const gather_part& p : kept) {
          for (std::size_t q = 0; q < n && p.bytes > 0; ++q) {
            std::byte* const dst = offset(p.recv, q * p.bytes);
            if (dst != p.send) std::memcpy(dst, gathered + q * packed + at, p.bytes);
          }
          at += p.bytes;
        }
      };
    } else {
      // Packing on a CUDA device would take device memory the footprint plan does not hold.
      fn = [kept](host_collectives& h, handle g, void* native) {
        for (const gather_part& p : kept) h.all_gather(g, p.send, p.recv, p.bytes, native);
      };
    }
    issue(call, stream, state_->members().sent(call.what, packed), alone, std::move(fn));
  }

  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                      stream_view stream) override {
    const collective_call call{collective::reduce_scatter, state_->name()};
    const std::uint64_t block = check_reduce_scatter(call, {send, recv, count, type}, op, size(), rank());
    const std::array alone{local_copy{send, recv, block}};
    issue(
        call, stream, state_->members().sent(call.what, block), alone,
        [=](host_collectives& h, handle g, void* native) { h.reduce_scatter(g, send, recv, count, type, op, native); });
  }

  void reduce_scatter_coalesced(std::span<const reduce_part> parts, reduce_op op, stream_view stream) override {
    const collective_call call{collective::reduce_scatter, state_->name()};
    std::uint64_t packed = 0;
    std::vector<local_copy> alone;
    for (const reduce_part& p : parts) {
      const std::uint64_t block = check_reduce_scatter(call, p, op, size(), rank());
      packed += block;
      alone.push_back({p.send, p.recv, block});
    }
    const std::vector<reduce_part> kept(parts.begin(), parts.end());
    const bool one_type =
        std::all_of(kept.begin(), kept.end(), [&](const reduce_part& p) { return p.type == kept.front().type; });
    const std::size_t n = size();
    host_call fn;
    if (on_host_device() && !kept.empty() && one_type) {
      // One call: block d of every part packed into block d of one buffer (one dtype, so one
      // reduction of the packed elements reduces each part's as its own call would).
      fn = [kept, packed, n, op](host_collectives& h, handle g, void* native) {
        const kernels::dtype type = kept.front().type;
        std::vector<std::byte> staging(std::max<std::uint64_t>(1, packed * (n + 1)));
        std::byte* const pack = staging.data();
        std::byte* const reduced = pack + n * packed;
        for (std::size_t d = 0; d < n; ++d) {
          std::uint64_t at = 0;
          for (const reduce_part& p : kept) {
            const std::uint64_t block = p.count * kernels::dtype_size(type);
            if (block > 0) std::memcpy(pack + d * packed + at, offset(p.send, d * block), block);
            at += block;
          }
        }
        h.reduce_scatter(g, pack, reduced, packed / kernels::dtype_size(type), type, op, native);
        std::uint64_t at = 0;
        for (const reduce_part& p : kept) {
          const std::uint64_t block = p.count * kernels::dtype_size(type);
          if (block > 0) std::memcpy(p.recv, reduced + at, block);
          at += block;
        }
      };
    } else {
      fn = [kept, op](host_collectives& h, handle g, void* native) {
        for (const reduce_part& p : kept) h.reduce_scatter(g, p.send, p.recv, p.count, p.type, op, native);
      };
    }
    issue(call, stream, state_->members().sent(call.what, packed), alone, std::move(fn));
  }

  void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    const collective_call call{collective::all_to_all, state_->name()};
    const std::uint64_t total = check_all_to_all(call, send, recv, bytes, size());
    const std::array alone{local_copy{send, recv, total}};
    issue(call, stream, state_->members().sent(call.what, bytes), alone,
          [=](host_collectives& h, handle g, void* native) { h.all_to_all(g, send, recv, bytes, native); });
  }

  void all_reduce(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                  stream_view stream) override {
    const collective_call call{collective::all_reduce, state_->name()};
    const std::uint64_t bytes = check_all_reduce(call, send, recv, count, type, op);
    const std::array alone{local_copy{send, recv, bytes}};
    issue(call, stream, state_->members().sent(call.what, bytes, 0, kernels::dtype_size(type)), alone,
          [=](host_collectives& h, handle g, void* native) { h.all_reduce(g, send, recv, count, type, op, native); });
  }

  void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view stream) override {
    const collective_call call{collective::broadcast, state_->name()};
    ZOE_EXPECTS(root < size(), who(call), ": root ", root, " is not a rank of the group (size ", size(), ")");
    check_buffer(call, "broadcast", buffer, bytes);
    issue(call, stream, state_->members().sent(call.what, bytes, root), {},
          [=](host_collectives& h, handle g, void* native) { h.broadcast(g, buffer, bytes, root, native); });
  }

  // The host sees the pair alone: a rank neither sending nor receiving only counts it.
  void point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to, stream_view stream) override {
    const collective_call call{collective::point_to_point, state_->name()};
    ZOE_EXPECTS(from < size() && to < size(), who(call), ": from ", from, " or to ", to,
                " is not a rank of the group (size ", size(), ")");
    const bool sends = rank() == from && from != to;
    const bool receives = rank() == to && from != to;
    if (sends || receives) check_buffer(call, "buffer", buffer, bytes);
    host_call fn;
    if (sends || receives) {
      fn = [=](host_collectives& h, handle g, void* native) { h.point_to_point(g, buffer, bytes, from, to, native); };
    }
    issue(call, stream, state_->members().sent(call.what, sends ? bytes : 0, to), {}, std::move(fn));
  }

  // On the calling thread, in the group's turn: after the collectives issued before it ran.
  void barrier() override {
    const std::string what = str("barrier on ", state_->name(), " (world rank ", state_->members().world_rank(), ")");
    state_->throw_if_failed(what);
    if (size() == 1) return;
    state_->run(
        state_->take_turn(), what, [](host_collectives& h, handle g, void* /*native*/) { h.barrier(g); }, nullptr);
  }

  [[nodiscard]] communicator& node_local() override { return sub_group(group_kind::node_local); }
  [[nodiscard]] communicator& cross_node() override { return sub_group(group_kind::cross_node); }
  [[nodiscard]] communicator& hpz() override { return sub_group(group_kind::hpz); }

  [[nodiscard]] comm_stats stats() const override { return traffic_.snapshot(); }

  // No channel to the peers but the host's own: this rank's groups refuse their later collectives
  // (and those queued, when their turn comes); the peers fail at the host's timeout.
  void abort(std::string_view reason) noexcept override {
    for (host_communicator* g : ctx_->world->all_groups()) {
      try {
        g->state_->fail(str(g->name(), " aborted by world rank ", g->state_->members().world_rank(), ": ", reason));
      } catch (...) {
        g->state_->fail("aborted");
      }
    }
  }

  [[nodiscard]] const std::shared_ptr<group_state>& state() const noexcept { return state_; }

  /// For the world: a sub-group it owns, of `kind`.
  host_communicator& add(group_kind kind, std::shared_ptr<group_state> state) {
    subs_.push_back(std::make_unique<host_communicator>(ctx_, std::move(state)));
    use(kind, *subs_.back());
    return *subs_.back();
  }
  /// For the world: its sub-group of `kind` is `g` (the world itself, or another sub-group).
  void use(group_kind kind, host_communicator& g) noexcept { groups_[static_cast<std::size_t>(kind)] = &g; }

 private:
  [[nodiscard]] bool on_host_device() const noexcept { return ctx_->dev->kind() == device_kind::host; }

  // "all_gather on host (world) (world rank 2)": every message names this rank.
  [[nodiscard]] std::string who(const collective_call& call) const {
    return str(describe(call), " (world rank ", state_->members().world_rank(), ")");
  }

  // Hands one checked collective to the host in the group's turn (a null `fn`: nothing for this
  // rank to hand over), or, in a group of one, makes the copies `alone` on the stream instead.
  void issue(const collective_call& call, stream_view stream, traffic sent, std::span<const local_copy> alone,
             host_call fn) {
    std::string what = who(call);
    state_->throw_if_failed(what);
    if (size() == 1 || !fn) {
      for (const local_copy& c : alone) {
        if (c.from != c.to && c.bytes > 0) {
          ctx_->dev->copy_async(c.to, c.from, c.bytes, copy_kind::device_to_device, stream);
        }
      }
      traffic_.count(call.what, sent);
      return;
    }
    const std::uint64_t turn = state_->take_turn();
    if (on_host_device()) {
      try {
        ctx_->dev->launch_host(
            stream, [state = state_, turn, what, fn = std::move(fn)] { state->run(turn, what, fn, nullptr); });
      } catch (...) {
        state_->abandon(str(what, ": could not be queued, and the group's later collectives would wait for it"));
        throw;
      }
    } else {
      state_->run(turn, what, fn, stream.native());
    }
    traffic_.count(call.what, sent);
  }

  communicator& sub_group(group_kind kind) {
    host_communicator* target = ctx_->world->groups_[static_cast<std::size_t>(kind)];
    if (this == ctx_->world) return *target;
    ZOE_EXPECTS(state_->members().within(target->state_->members()), name(), ": its ranks (",
                state_->members().describe_members(), ") do not lie within the ", group_kind_name(kind),
                " group; ask the world for it");
    return *this;
  }

  [[nodiscard]] std::vector<host_communicator*> all_groups() {
    std::vector<host_communicator*> all{this};
    for (const auto& g : subs_) all.push_back(g.get());
    return all;
  }

  // Waits for the queued collectives (refused at once when an exception unwinds: this rank
  // failed), then ends every group made for this world.
  void shut_down() noexcept {
    const std::vector<host_communicator*> all = all_groups();
    if (std::uncaught_exceptions() > 0) abort("it failed and was destroyed while an exception unwound");
    for (host_communicator* g : all) {
      try {
        g->state_->drain();
      } catch (const std::exception& e) {
        log::error(g->name(), ": waiting for its collectives failed: ", e.what());
      }
    }
    for (auto it = ctx_->made.rbegin(); it != ctx_->made.rend(); ++it) (*it)->destroy();
  }

  std::shared_ptr<world_context> ctx_;
  std::shared_ptr<group_state> state_;
  std::array<host_communicator*, 4> groups_{};            // the world's: indexed by group_kind
  std::vector<std::unique_ptr<host_communicator>> subs_;  // the world's: the sub-groups it owns
  traffic_counter traffic_;
};

// Every group of `kind` in the world, ordered by first member (each rank computes the same list).
std::vector<std::vector<std::size_t>> partition(group_kind kind, std::size_t world_size, std::size_t ranks_per_node,
                                                std::size_t hpz_size) {
  std::vector<std::vector<std::size_t>> groups;
  std::vector<bool> placed(world_size, false);
  for (std::size_t w = 0; w < world_size; ++w) {
    if (placed[w]) continue;
    rank_group g = make_rank_group(kind, world_size, w, ranks_per_node, hpz_size);
    for (const std::size_t m : g.world_ranks) placed[m] = true;
    groups.push_back(std::move(g.world_ranks));
  }
  return groups;
}

// Asks the host for one group; its failure names the group and this rank.
std::shared_ptr<group_state> create(world_context& ctx, const std::shared_ptr<host_collectives>& host,
                                    const rank_group& members, std::span<const std::size_t> ranks) {
  handle h = nullptr;
  try {
    h = host->create_group(ranks);
  } catch (const std::exception& e) {
    rank_group asked = members;
    asked.world_ranks.assign(ranks.begin(), ranks.end());
    const auto* category = dynamic_cast<const error*>(&e);
    throw error(category != nullptr ? category->category() : error_category::comm,
                str("create_group on host (", group_kind_name(members.kind), ") of ", asked.describe_members(),
                    " (world rank ", members.world_rank(), "): ", e.what()));
  }
  // A rank outside the group keeps its handle only to destroy it (named, in messages, as this rank's group).
  const bool member = std::equal(ranks.begin(), ranks.end(), members.world_ranks.begin(), members.world_ranks.end());
  auto state = std::make_shared<group_state>(host, h, members);
  ctx.made.push_back(state);
  return member ? state : nullptr;
}

}  // namespace

std::unique_ptr<communicator> make_host_communicator(device& dev, const comm_options& options) {
  ZOE_EXPECTS(options.host != nullptr, "zoe.comm.backend: host needs the host program's collectives");
  const std::shared_ptr<host_collectives>& host = options.host;
  const std::size_t world_size = host->world_size();
  const std::size_t world_rank = host->rank();
  ZOE_EXPECTS(world_size > 0 && world_rank < world_size, "host communicator: the host's rank ", world_rank,
              " is not below its world size ", world_size);
  std::size_t ranks_per_node = options.ranks_per_node;
  std::string ranks_per_node_key = "zoe.ranks_per_node";
  if (ranks_per_node == 0) {
    ranks_per_node = host->ranks_per_node() == 0 ? world_size : host->ranks_per_node();
    ranks_per_node_key = "the host's ranks_per_node";
  }
  if (world_size % ranks_per_node != 0) {
    throw config_error(str(ranks_per_node_key, ": ", ranks_per_node, " does not divide the world size ", world_size));
  }
  const std::size_t hpz_size = options.hpz_partition_size;
  if (hpz_size == 0 || world_size % hpz_size != 0) {
    throw config_error(
        str("zero_optimization.zero_hpz_partition_size: ", hpz_size, " does not divide the world size ", world_size));
  }
  if (world_size == 1) return make_single_communicator(dev);

  auto ctx = std::make_shared<world_context>();
  ctx->dev = &dev;
  const rank_group world_members = make_rank_group(group_kind::world, world_size, world_rank, ranks_per_node, hpz_size);
  auto world = std::make_unique<host_communicator>(ctx, create(*ctx, host, world_members, world_members.world_ranks));
  world->become_world();

  // From here a throw destroys `world`, which ends the groups made so far.
  std::vector<std::vector<std::vector<std::size_t>>> made_partitions;
  std::vector<host_communicator*> made_groups;
  for (const group_kind kind : {group_kind::node_local, group_kind::cross_node, group_kind::hpz}) {
    rank_group members = make_rank_group(kind, world_size, world_rank, ranks_per_node, hpz_size);
    if (members.size() == world_size) continue;  // the world itself (become_world's default)
    const std::vector<std::vector<std::size_t>> groups = partition(kind, world_size, ranks_per_node, hpz_size);
    const auto same = std::find(made_partitions.begin(), made_partitions.end(), groups);
    if (same != made_partitions.end()) {
      world->use(kind, *made_groups[static_cast<std::size_t>(same - made_partitions.begin())]);
      continue;
    }
    std::shared_ptr<group_state> mine;
    if (members.size() == 1) {
      mine = std::make_shared<group_state>(host, nullptr, members);  // a group of one copies locally
    } else {
      for (const std::vector<std::size_t>& g : groups) {
        if (std::shared_ptr<group_state> s = create(*ctx, host, members, g)) mine = std::move(s);
      }
    }
    made_partitions.push_back(groups);
    made_groups.push_back(&world->add(kind, std::move(mine)));
  }
  log::info("host communicator: world rank ", world_rank, " of ", world_size, " on ", dev.name(), ", ", ranks_per_node,
            " ranks per node, ", ctx->made.size(), " host groups");
  return world;
}

}  // namespace zoe::engine::detail
