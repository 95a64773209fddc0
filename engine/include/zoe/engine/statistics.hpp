#pragma once
// The engine's figures as one JSON document, for the C API's zoe_statistics and for tools: bytes
// and bandwidth per tier and direction, time spent waiting on fetches, the optimizer's and the
// activations' figures, and the footprint plan against the peak use of each tier.

#include <string>

#include "zoe/engine/engine.hpp"

namespace zoe::engine {

/// One JSON object (no newline), keys in snake_case with their unit in the name. The counters add
/// up everything since the engine was made (measure_stages' I/O included):
///   nvme_read_bytes, nvme_write_bytes   every stage's NVMe bytes summed
///   host_device_copy_bytes              parameters copied between the device and host homes or
///                                       NVMe homes' pinned slots, reduced gradients copied off
///                                       the device, and the activations' copies both ways
///   fetch_wait_seconds                  time callers spent waiting on fetches
///   optimizer_steps, loss_scale
///   parameters   the parameter swapper: nvme_{read,write}_bytes and _gib_per_s over io_busy_seconds
///                (the time its I/O thread had NVMe I/O in flight), moves, buffer waits
///   fetches      the coordinator: fetches, gathers, prefetches, prefetch_backoffs, evictions,
///                arena waits and peak, fetch_wait_seconds
///   gradients    the gradient path: nvme_{read,write}_bytes and _gib_per_s over accumulate_seconds,
///                device_to_host_bytes
///   optimizer    the optimizer step's totals (steps, stage_runs, seconds, adam_seconds, NVMe bytes
///                and _gib_per_s over its seconds) and last_step (the last whole step's figures)
///   activations  the activation store: saves, loads, prefetch_hits, device_to_host_bytes,
///                host_to_device_bytes, nvme_{read,write}_bytes, load_wait_seconds, and its shares
///                planned beside their peaks (host_planned_bytes / host_peak_bytes, nvme_..., and
///                prefetch_planned_bytes, staging_planned_bytes)
///   footprint    the plan beside the use: device {planned_bytes, peak_bytes, current_bytes,
///                budget_bytes, state_bytes}, pinned_host {planned_bytes, peak_bytes, current_bytes,
///                state_bytes}, pageable_host {planned_bytes, state_bytes}, nvme {planned_bytes,
///                state_bytes, capacity_bytes, used_bytes, direct_io}, the plan's buffer sizes, and
///                its items [{what, memory, bytes}]
///   comm         the bytes this rank handed the transport (communicator.hpp's bytes_to rule):
///                world_size, rank; groups {world, node_local, cross_node, hpz (the coordinator's
///                world and its sub-groups; one that is the world itself adds "same_as": "world"),
///                gradient_world (the gradient path's world with its sub-groups)}, each {calls,
///                intra_node_bytes, inter_node_bytes, and per collective (all_gather,
///                reduce_scatter, all_to_all, all_reduce, broadcast) {intra_node_bytes,
///                inter_node_bytes}}; and the same totals over every distinct group. All bytes
///                are 0 at world size 1.
/// Reads the stages' counters only; not concurrently with calls
/// that change the engine (the engine's one-thread calls). Throws what allocation throws.
[[nodiscard]] std::string statistics_json(offload_engine& engine);

/// The bytes the engine's collectives sent: the coordinator's world and the gradient path's world,
/// each with its sub-groups, every distinct group once (statistics_json's comm totals). Throws
/// what a communicator's stats() throws.
[[nodiscard]] comm_stats comm_traffic(engine_resources& resources);

}  // namespace zoe::engine
