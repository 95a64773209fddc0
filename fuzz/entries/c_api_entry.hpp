#pragma once
// The C API fuzz target's entry (zoe_fuzz_c_entries, over the C API alone).

#include <cstdint>
#include <span>

#include "entry.hpp"

namespace zoe::fuzz {

/// Sequences of C API calls: the bytes choose a small model and configuration (host device with a
/// small budget; states in device memory, pinned host or NVMe under a scratch folder), then calls
/// (micro-batches, fetch, release, gradients, step, activations, save, load, engine destroy and
/// create, ...) in any order with any arguments, sizes capped small. Every call must return a
/// status zoe documents, never ZOE_ERROR_INTERNAL, and leave the engine usable. accepted: at least
/// one optimizer step ran. Thread-safe.
outcome run_c_api(std::span<const std::uint8_t> bytes);

}  // namespace zoe::fuzz
