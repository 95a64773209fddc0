#pragma once
// The config fuzz target's entry (zoe_fuzz_engine_entries, over zoe::engine).

#include <cstdint>
#include <span>

#include "entry.hpp"

namespace zoe::fuzz {

/// The config reader: the bytes as a JSON document through parse_config (parse and validate),
/// then its rendered form parsed again (it must give the same rendering), then the footprint plan
/// for a small model on 1 to 4 ranks and its check against a fixed machine. Thread-safe.
outcome run_config(std::span<const std::uint8_t> bytes);

}  // namespace zoe::fuzz
