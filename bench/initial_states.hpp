#pragma once
// Initial values for every state of every shard of an engine's resources (engine_resources),
// written to their homes wherever they are (device memory, host memory, an NVMe extent), as a
// checkpoint load or the engine's initialization would leave them: what zoe-bench optimizer steps
// from.

#include <cstdint>

#include "zoe/core/device.hpp"
#include "zoe/engine/engine_resources.hpp"

namespace zoe::bench {

/// Gives each state of each shard values of the size training has (master weights and working
/// copies in [-1, 1), exp_avg in [-1e-3, 1e-3), exp_avg_sq in [1e-8, 1e-6), gradients in
/// [-1e-2, 1e-2); never subnormal, so no CPU path slows down on them; padding zero) and writes them
/// to the state's home through engine::state_io (resident and clean afterwards). `dev` is the
/// resources' device. Returns the bytes written. Throws what state_io::write throws.
std::uint64_t write_initial_states(engine::engine_resources& resources, device& dev);

}  // namespace zoe::bench
