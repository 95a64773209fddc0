// The tier manager: every state's home, allocated once, and its status under one lock.
#include "zoe/engine/tiers/tier_manager.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine {
namespace {

// Pageable homes are page-aligned so O_DIRECT reads and writes can use them as they are.
constexpr std::size_t page = 4096;

// Whether the optimizer step rewrites state `s` in place on nvme, and so needs a shadow extent.
bool has_shadow(const state_location& loc, state_kind s) noexcept {
  return loc.where == tier::nvme && loc.bytes > 0 && s != state_kind::gradient;
}

struct free_deleter {
  void operator()(std::byte* p) const noexcept { std::free(p); }  // NOLINT(cppcoreguidelines-no-malloc)
};

}  // namespace

std::string_view state_status_name(state_status s) noexcept {
  switch (s) {
    case state_status::released: return "released";
    case state_status::resident: return "resident";
    case state_status::in_flight: return "in flight";
  }
  return "unknown";
}

struct tier_manager::impl {
  struct home {
    state_location location;
    io::swap_extent shadow;  // the optimizer step's second extent (bytes 0 when none)
    allocators::pinned_buffer pinned;
    std::unique_ptr<std::byte, free_deleter> pageable;
  };
  struct entry {
    state_status status = state_status::released;
    move_kind moving = move_kind::read;  // the move under way while in_flight
    bool dirty = false;
    // During a write: whether the source changed after the write took its bytes (set_dirty while
    // in flight), so finishing the write must leave the home dirty.
    bool dirtied_while_writing = false;
  };

  impl(device& d, io::swap_store* s) : dev(d), store(s) {}
  ~impl() {
    for (home& h : homes) {
      if (h.location.device != nullptr) dev.deallocate(h.location.device, h.location.bytes);
      if (h.location.where == tier::nvme) {
        free_extent(h.location.extent);
        free_extent(h.shadow);
      }
    }
  }
  void free_extent(const io::swap_extent& e) noexcept {
    if (e.bytes == 0) return;
    try {
      store->free(e);
    } catch (const std::exception& x) {
      log::error("tier manager: cannot free swap extent ", e.id, ": ", x.what());
    }
  }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  // Allocates h's home where its location says; throws what the allocator throws.
  void allocate(home& h, allocators::pinned_host_resource& pinned_memory, bool pinned) {
    state_location& loc = h.location;
    switch (loc.where) {
      case tier::device: loc.device = dev.allocate(loc.bytes); break;
      case tier::host:
        if (pinned) {
          h.pinned = pinned_memory.allocate(loc.bytes);
          loc.host = h.pinned.span();
          loc.pinned = h.pinned.locked();
        } else {
          h.pageable.reset(static_cast<std::byte*>(std::aligned_alloc(page, round_up(loc.bytes, page))));  // NOLINT
          ZOE_CHECK(h.pageable != nullptr, memory_error, "cannot allocate ", format_bytes(loc.bytes),
                    " of pageable host memory");
          loc.host = {h.pageable.get(), loc.bytes};
        }
        break;
      case tier::nvme: loc.extent = store->allocate(loc.bytes); break;
    }
  }

  device& dev;
  io::swap_store* store;
  std::vector<home> homes;  // parameter-major, like the placement
  std::array<std::uint64_t, memory_kind_count> bytes{};

  mutable std::mutex mutex;
  std::vector<entry> entries;
};

tier_manager::tier_manager(const model_layout& layout, const placement& where, const footprint_plan& plan,
                           tier_resources resources)
    : layout_(&layout), impl_(std::make_unique<impl>(resources.dev, resources.store)) {
  const std::size_t n = layout.parameters().size();
  ZOE_EXPECTS(where.parameter_count() == n, "tier manager: the placement has ", where.parameter_count(),
              " parameters, the layout ", n);
  impl& m = *impl_;
  m.homes.resize(n * state_kind_count);
  m.entries.resize(n * state_kind_count);
  std::array<std::uint64_t, memory_kind_count> wanted{};
  for (const parameter_layout& p : layout.parameters()) {
    for (const state_kind s : all_states) {
      state_location& loc = m.homes[p.id * state_kind_count + static_cast<std::size_t>(s)].location;
      loc.where = where.where(p.id, s);
      loc.bytes = state_bytes(p, s);
      loc.pinned = loc.where == tier::host && where.host_pinned(s);
      wanted[static_cast<std::size_t>(memory_of(loc.where, loc.pinned))] += loc.bytes;
    }
  }
  for (std::size_t k = 0; k < memory_kind_count; ++k) {
    ZOE_EXPECTS(wanted[k] == plan.state_bytes[k], "tier manager: the placement puts ", format_bytes(wanted[k]),
                " of states in ", memory_kind_name(static_cast<memory_kind>(k)), " memory, the plan ",
                format_bytes(plan.state_bytes[k]), ": the plan was made for another placement");
  }
  ZOE_EXPECTS(resources.store != nullptr || wanted[static_cast<std::size_t>(memory_kind::nvme)] == 0,
              "tier manager: ", format_bytes(wanted[static_cast<std::size_t>(memory_kind::nvme)]),
              " of states are placed on nvme but no swap store was given");

  // Device and host homes in layout order, then the extents (homes and the optimizer step's
  // shadows alike) largest first: the plan's store capacity counts on that order
  // (footprint_plan.cpp).
  struct allocation {
    std::size_t index;
    bool shadow;
  };
  std::vector<allocation> order;
  std::vector<allocation> extents;
  for (std::size_t i = 0; i < m.homes.size(); ++i) {
    const state_location& loc = m.homes[i].location;
    if (loc.bytes == 0) continue;
    if (loc.where != tier::nvme) {
      order.push_back({i, false});
      continue;
    }
    extents.push_back({i, false});
    if (plan.shadow_extents && has_shadow(loc, all_states[i % state_kind_count])) extents.push_back({i, true});
  }
  std::stable_sort(extents.begin(), extents.end(), [&m](const allocation& a, const allocation& b) {
    return m.homes[a.index].location.bytes > m.homes[b.index].location.bytes;
  });
  order.insert(order.end(), extents.begin(), extents.end());
  for (const allocation& a : order) {
    impl::home& h = m.homes[a.index];
    const bool pinned = h.location.pinned;
    if (!a.shadow) h.location.pinned = false;  // set again from what the OS granted
    try {
      if (a.shadow) {
        h.shadow = resources.store->allocate(h.location.bytes);
      } else {
        m.allocate(h, resources.pinned, pinned);
      }
    } catch (const memory_error& e) {
      const parameter_layout& p = layout.parameter(static_cast<parameter_id>(a.index / state_kind_count));
      throw memory_error(str("tier manager: cannot allocate the ", format_bytes(h.location.bytes),
                             a.shadow ? " shadow extent (for the optimizer step) of " : " home of ",
                             state_kind_name(all_states[a.index % state_kind_count]), " of parameter '", p.name,
                             "' in ", tier_name(h.location.where), ": ", e.what()));
    }
    if (!a.shadow) {
      m.bytes[static_cast<std::size_t>(memory_of(h.location.where, h.location.pinned))] += h.location.bytes;
    }
  }
}

tier_manager::~tier_manager() = default;

std::size_t tier_manager::slot(parameter_id p, state_kind s) const {
  ZOE_EXPECTS(p < layout_->parameters().size(), "tier manager: no parameter ", p, " (the layout has ",
              layout_->parameters().size(), ")");
  return static_cast<std::size_t>(p) * state_kind_count + static_cast<std::size_t>(s);
}

const state_location& tier_manager::location(parameter_id p, state_kind s) const {
  return impl_->homes[slot(p, s)].location;
}

state_status tier_manager::status(parameter_id p, state_kind s) const {
  const std::size_t i = slot(p, s);
  const std::lock_guard lock(impl_->mutex);
  return impl_->entries[i].status;
}

bool tier_manager::dirty(parameter_id p, state_kind s) const {
  const std::size_t i = slot(p, s);
  const std::lock_guard lock(impl_->mutex);
  return impl_->entries[i].dirty;
}

std::uint64_t tier_manager::home_bytes(memory_kind m) const noexcept {
  return impl_->bytes[static_cast<std::size_t>(m)];
}

void tier_manager::refuse(parameter_id p, state_kind s, std::string_view transition, state_status from) const {
  throw usage_error(str("tier manager: cannot ", transition, " ", state_kind_name(s), " of parameter '",
                        layout_->parameter(p).name, "': it is ", state_status_name(from)));
}

bool tier_manager::begin_move(parameter_id p, state_kind s, move_kind kind) {
  const std::size_t i = slot(p, s);
  const std::lock_guard lock(impl_->mutex);
  impl::entry& e = impl_->entries[i];
  if (e.status == state_status::in_flight) return false;
  if (kind != move_kind::write && e.status == state_status::released) {
    refuse(p, s, kind == move_kind::read ? "read" : "rewrite", e.status);
  }
  e.moving = kind;
  e.dirtied_while_writing = false;
  e.status = state_status::in_flight;
  return true;
}

void tier_manager::finish_move(parameter_id p, state_kind s) {
  const std::size_t i = slot(p, s);
  const std::lock_guard lock(impl_->mutex);
  impl::entry& e = impl_->entries[i];
  if (e.status != state_status::in_flight) refuse(p, s, "finish a move of", e.status);
  e.status = state_status::resident;
  if (e.moving == move_kind::write) e.dirty = e.dirtied_while_writing;
}

void tier_manager::abort_move(parameter_id p, state_kind s) {
  const std::size_t i = slot(p, s);
  const std::lock_guard lock(impl_->mutex);
  impl::entry& e = impl_->entries[i];
  if (e.status != state_status::in_flight) refuse(p, s, "abort a move of", e.status);
  if (e.moving != move_kind::write) {
    // A read or a rewrite starts only from resident and leaves the home intact (a rewrite wrote
    // the shadow, or its caller put the undo copy back): still resident, dirty as it was.
    e.status = state_status::resident;
  } else {
    e.status = state_status::released;
    e.dirty = true;
  }
}

void tier_manager::mark_written(parameter_id p, state_kind s) {
  const std::size_t i = slot(p, s);
  const std::lock_guard lock(impl_->mutex);
  impl::entry& e = impl_->entries[i];
  if (e.status == state_status::in_flight) refuse(p, s, "mark as written", e.status);
  e.status = state_status::resident;
}

void tier_manager::mark_released(parameter_id p, state_kind s) {
  const std::size_t i = slot(p, s);
  const std::lock_guard lock(impl_->mutex);
  impl::entry& e = impl_->entries[i];
  if (e.status == state_status::in_flight) refuse(p, s, "release", e.status);
  e.status = state_status::released;
}

void tier_manager::set_dirty(parameter_id p, state_kind s, bool dirty) {
  const std::size_t i = slot(p, s);
  const std::lock_guard lock(impl_->mutex);
  impl::entry& e = impl_->entries[i];
  e.dirty = dirty;
  if (e.status == state_status::in_flight && e.moving == move_kind::write) e.dirtied_while_writing = dirty;
}

io::swap_extent tier_manager::shadow(parameter_id p, state_kind s) const { return impl_->homes[slot(p, s)].shadow; }

void tier_manager::commit_shadow(parameter_id p, state_kind s) {
  const std::size_t i = slot(p, s);
  impl::home& h = impl_->homes[i];
  const std::lock_guard lock(impl_->mutex);
  if (h.shadow.bytes == 0) {
    throw usage_error(str("tier manager: cannot commit the shadow of ", state_kind_name(s), " of parameter '",
                          layout_->parameter(p).name,
                          "': it has none (only states on nvme the optimizer step "
                          "rewrites do)"));
  }
  const impl::entry& e = impl_->entries[i];
  if (e.status != state_status::resident) refuse(p, s, "commit the shadow of", e.status);
  std::swap(h.location.extent, h.shadow);
}

}  // namespace zoe::engine
