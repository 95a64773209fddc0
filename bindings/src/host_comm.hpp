#pragma once
// zoe_host_comm (zoe.h) as the engine's host_collectives: each callback called with a zeroed
// message buffer, and a status other than ZOE_SUCCESS thrown as the zoe::error of that status
// carrying the host's message (the host backend adds the collective, the group and the rank).

#include <memory>

#include "zoe/engine/comm/host_collectives.hpp"
#include "zoe/zoe.h"

namespace zoe::bindings {

/// The host's collectives of `comm` (copied; its `user` is the caller's to keep alive). usage_error
/// naming the field for a short struct, a missing callback, a world size of 0, a rank not below
/// it, or ranks_per_node not dividing it.
[[nodiscard]] std::shared_ptr<engine::host_collectives> host_collectives_of(const zoe_host_comm* comm);

}  // namespace zoe::bindings
