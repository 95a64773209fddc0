// All-or-nothing writes of a parameter's states (state_writes.hpp).
#include "state_writes.hpp"

#include <exception>
#include <utility>

#include "zoe/core/log.hpp"

namespace zoe::engine::detail {

void write_states_together(tier_manager& tiers, state_io& io, parameter_id p, std::span<const state_write> writes) {
  // Decided once, before anything is written: a released state written in place below becomes
  // resident, and its shadow must not be committed then.
  std::vector<bool> shadowed;
  for (const state_write& w : writes) {
    shadowed.push_back(tiers.location(p, w.state).where == tier::nvme && tiers.shadow(p, w.state).bytes > 0 &&
                       tiers.status(p, w.state) == state_status::resident);
  }
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (shadowed[i]) io.write_shadow(p, writes[i].state, writes[i].bytes);
  }
  std::vector<std::pair<state_kind, std::vector<std::byte>>> undo;
  try {
    for (std::size_t i = 0; i < writes.size(); ++i) {
      const state_write& w = writes[i];
      if (shadowed[i]) continue;
      if (tiers.status(p, w.state) == state_status::resident) {
        undo.emplace_back(w.state, std::vector<std::byte>(w.bytes.size()));
        io.read(p, w.state, undo.back().second);
      }
      io.write(p, w.state, w.bytes);
    }
  } catch (...) {
    for (const auto& [s, old] : undo) {
      try {
        io.write(p, s, old);
      } catch (const std::exception& e) {
        log::error("write_state: putting the old ", state_kind_name(s), " back failed (it stays released): ", e.what());
      }
    }
    throw;
  }
  // Every write is good: the shadows become the homes (a swap of two extents, which cannot fail
  // for a resident state with a shadow).
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (shadowed[i]) tiers.commit_shadow(p, writes[i].state);
  }
}

}  // namespace zoe::engine::detail
