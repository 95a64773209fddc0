// The optimizer step's undo log.
#include "undo_log.hpp"

#include <cstring>
#include <new>

#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine::detail {

undo_log::undo_log(std::uint64_t capacity) : capacity_(capacity) {
  if (capacity == 0) return;
  try {
    memory_ = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(capacity));  // NOLINT
  } catch (const std::bad_alloc&) {
    throw memory_error(
        str("optimizer step: cannot allocate the ", format_bytes(capacity), " undo log (pageable host memory)"));
  }
}

void undo_log::check_room(parameter_id p, state_kind s, std::uint64_t bytes) const {
  ZOE_EXPECTS(bytes <= capacity_ - used_, "optimizer step: the undo log (", format_bytes(capacity_), ") cannot hold ",
              bytes, " more bytes of ", state_kind_name(s), " of parameter ", p,
              ": it was sized for another placement");
}

void undo_log::record(parameter_id p, state_kind s, std::uint64_t offset, std::span<const std::byte> before) {
  check_room(p, s, before.size());
  std::memcpy(memory_.get() + used_, before.data(), before.size());
  entries_.push_back({.param = p, .state = s, .offset = offset, .bytes = before.size(), .at = used_});
  used_ += before.size();
}

void undo_log::restore(const tier_manager& tiers, device& dev, stream_view stream) {
  bool copied = false;
  for (const entry& e : entries_) {
    const state_location& home = tiers.location(e.param, e.state);
    const std::byte* from = memory_.get() + e.at;
    if (home.where == tier::host) {
      std::memcpy(home.host.data() + e.offset, from, e.bytes);
    } else {
      dev.copy_async(static_cast<std::byte*>(home.device) + e.offset, from, e.bytes, copy_kind::host_to_device, stream);
      copied = true;
    }
  }
  if (copied) dev.synchronize(stream);
  clear();
}

}  // namespace zoe::engine::detail
