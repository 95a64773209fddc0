#pragma once
// The engine's figures as one JSON document, for the C API's zoe_statistics and for tools: bytes
// and bandwidth per tier and direction, time spent waiting on fetches, the optimizer's and the
// activations' figures, and the footprint plan against the peak use of each tier.

#include <string>

#include "zoe/engine/engine.hpp"

namespace zoe::engine {

/// One JSON object (no newline). Reads the stages' counters only; not concurrently with calls
/// that change the engine (the engine's one-thread calls). Throws what allocation throws.
[[nodiscard]] std::string statistics_json(offload_engine& engine);

}  // namespace zoe::engine
