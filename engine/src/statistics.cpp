// The engine's figures as one JSON object (statistics.hpp): each stage's counters as it keeps
// them, the bandwidth each achieved over the time it had I/O to do, and the footprint plan beside
// what each memory held at its peak.
#include "zoe/engine/statistics.hpp"

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace zoe::engine {
namespace {

using json = nlohmann::ordered_json;

// GiB per second of `bytes` over `seconds`; 0 when no time passed (nothing was moved).
double gib_per_s(std::uint64_t bytes, double seconds) {
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  return seconds > 0 ? static_cast<double>(bytes) / gib / seconds : 0.0;
}

// NVMe reads and writes of a stage, with their bandwidth over `seconds` (the stage's I/O time).
void add_nvme(json& j, std::uint64_t read, std::uint64_t written, double seconds) {
  j["nvme_read_bytes"] = read;
  j["nvme_write_bytes"] = written;
  j["nvme_read_gib_per_s"] = gib_per_s(read, seconds);
  j["nvme_write_gib_per_s"] = gib_per_s(written, seconds);
}

json parameter_figures(const parameter_swapper_stats& s) {
  json j;
  add_nvme(j, s.bytes_read, 0, s.io_busy_seconds);  // the parameter path only reads
  j["io_busy_seconds"] = s.io_busy_seconds;
  j["host_device_copy_bytes"] = s.bytes_copied + s.bytes_staged;
  j["moves_in"] = s.moves_in;
  j["failed_moves"] = s.failed_moves;
  j["buffer_waits"] = s.buffer_waits;
  j["buffer_slots"] = s.buffer_slots;
  j["peak_buffers_in_use"] = s.peak_buffers_in_use;
  j["pinned_bytes"] = s.pinned_bytes;
  return j;
}

json fetch_figures(const coordinator_stats& s) {
  json j;
  j["fetches"] = s.fetches;
  j["fetch_wait_seconds"] = s.wait_seconds;
  j["gathers"] = s.gathers;
  j["prefetches"] = s.prefetches;
  j["prefetch_backoffs"] = s.prefetch_backoffs;
  j["evictions"] = s.evictions;
  j["arena_waits"] = s.arena_waits;
  j["failed_gathers"] = s.failed_gathers;
  j["peak_live_numel"] = s.peak_live_numel;
  j["arena_capacity_bytes"] = s.arena.capacity;
  j["arena_peak_used_bytes"] = s.arena.peak_used;
  j["arena_compactions"] = s.arena.compactions;
  j["arena_compaction_moved_bytes"] = s.arena.bytes_moved;
  j["arena_compaction_seconds"] = s.arena.seconds_compacting;
  return j;
}

json gradient_figures(const gradient_path_stats& s) {
  json j;
  add_nvme(j, s.bytes_read, s.bytes_written, s.accumulate_seconds);
  j["accumulate_seconds"] = s.accumulate_seconds;
  j["device_to_host_bytes"] = s.bytes_to_host;
  j["modules_reduced"] = s.modules_reduced;
  j["reduced_bytes"] = s.bytes_reduced;
  j["bucket_waits"] = s.bucket_waits;
  j["pinned_bytes"] = s.pinned_bytes;
  j["device_bucket_bytes"] = s.device_bucket_bytes;
  return j;
}

json last_step_figures(const optimizer_step_stats& s) {
  json j;
  add_nvme(j, s.bytes_read, s.bytes_written, s.seconds);
  j["seconds"] = s.seconds;
  j["adam_seconds"] = s.adam_seconds;
  j["read_wait_seconds"] = s.read_wait_seconds;
  j["write_wait_seconds"] = s.write_wait_seconds;
  j["stepped_bytes"] = s.bytes_stepped;
  j["pieces"] = s.pieces;
  j["max_pieces_in_flight"] = s.max_pieces_in_flight;
  j["undo_bytes"] = s.undo_bytes;
  j["pinned_bytes"] = s.pinned_bytes;
  return j;
}

json optimizer_figures(const optimizer_step& o) {
  const optimizer_step_totals& t = o.totals();
  json j;
  add_nvme(j, t.bytes_read, t.bytes_written, t.seconds);
  j["steps"] = t.steps;
  j["stage_runs"] = t.stage_runs;
  j["failed_runs"] = t.failed_runs;
  j["seconds"] = t.seconds;
  j["adam_seconds"] = t.adam_seconds;
  j["read_wait_seconds"] = t.read_wait_seconds;
  j["write_wait_seconds"] = t.write_wait_seconds;
  j["stepped_bytes"] = t.bytes_stepped;
  j["last_step"] = last_step_figures(o.last_step());
  // The step inside backward (optimizer_step.hpp, "Speculation"); its bytes are in the figures above.
  const speculation_totals& ahead = o.speculation();
  j["speculation"] = {{"speculated", ahead.speculated},
                      {"committed", ahead.committed},
                      {"dropped", ahead.dropped},
                      {"declined", ahead.declined},
                      {"forgone", ahead.forgone},
                      {"nvme_read_bytes", ahead.bytes_read},
                      {"nvme_write_bytes", ahead.bytes_written},
                      {"fetched_master_bytes", ahead.fetched_bytes}};
  return j;
}

// The activation checkpoints' moves, and their shares as planned beside their peaks.
json activation_figures(const activation_stats& s, const footprint_plan& plan) {
  json j;
  j["saves"] = s.saves;
  j["loads"] = s.loads;
  j["prefetch_hits"] = s.prefetch_hits;
  j["device_to_host_bytes"] = s.bytes_to_host;
  j["host_to_device_bytes"] = s.bytes_to_device;
  j["nvme_read_bytes"] = s.bytes_read;
  j["nvme_write_bytes"] = s.bytes_written;
  j["load_wait_seconds"] = s.load_wait_seconds;
  j["host_planned_bytes"] = plan.activation_host_bytes;
  j["host_peak_bytes"] = s.peak_host_bytes;
  j["nvme_planned_bytes"] = plan.activation_nvme_bytes;
  j["nvme_peak_bytes"] = s.peak_nvme_bytes;
  j["prefetch_planned_bytes"] = plan.activation_prefetch_bytes;
  j["staging_planned_bytes"] = plan.activation_staging_bytes;
  return j;
}

json footprint_figures(offload_engine& engine) {
  engine_resources& resources = engine.resources();
  const footprint_plan& plan = resources.plan();
  const device_usage dev = resources.pinned().owner_device().usage();
  const auto state = [&](memory_kind m) { return plan.state_bytes.at(static_cast<std::size_t>(m)); };
  json j;
  j["device"] = {{"planned_bytes", plan.device_bytes},
                 {"peak_bytes", dev.peak_bytes},
                 {"current_bytes", dev.current_bytes},
                 {"budget_bytes", dev.budget_bytes},
                 {"state_bytes", state(memory_kind::device)}};
  j["pinned_host"] = {{"planned_bytes", plan.pinned_bytes},
                      {"peak_bytes", resources.pinned().peak_bytes_in_use()},
                      {"current_bytes", resources.pinned().bytes_in_use()},
                      {"state_bytes", state(memory_kind::pinned)}};
  // Pageable host memory is not counted as it is used: the plan alone.
  j["pageable_host"] = {{"planned_bytes", plan.pageable_bytes}, {"state_bytes", state(memory_kind::pageable)}};
  json nvme = {{"planned_bytes", plan.nvme_bytes}, {"state_bytes", state(memory_kind::nvme)}};
  if (const io::swap_store* store = resources.store()) {
    nvme["capacity_bytes"] = store->capacity();
    nvme["used_bytes"] = store->capacity() - store->free_bytes();
    nvme["direct_io"] = store->direct();
  }
  j["nvme"] = std::move(nvme);
  j["arena_bytes"] = plan.arena_bytes;
  j["param_buffer_count"] = plan.param_buffer_count;
  j["param_buffer_bytes"] = plan.param_buffer_bytes;
  j["optimizer_buffer_count"] = plan.optimizer_buffer_count;
  j["optimizer_buffer_bytes"] = plan.optimizer_buffer_bytes;
  j["optimizer_undo_bytes"] = plan.optimizer_undo_bytes;
  j["optimizer_pending_bytes"] = plan.optimizer_pending_bytes;
  j["gradient_bucket_count"] = plan.gradient_bucket_count;
  j["gradient_bucket_bytes"] = plan.gradient_bucket_bytes;
  j["gradient_buffer_count"] = plan.gradient_buffer_count;
  j["gradient_buffer_bytes"] = plan.gradient_buffer_bytes;
  json items = json::array();
  for (const plan_item& item : plan.items) {
    items.push_back({{"what", item.what}, {"memory", memory_kind_name(item.memory)}, {"bytes", item.bytes}});
  }
  j["items"] = std::move(items);
  return j;
}

// One group's traffic: per collective and in all, intra- and inter-node bytes, and its calls.
json group_figures(const comm_stats& s) {
  json j;
  j["calls"] = s.calls;
  j["intra_node_bytes"] = s.total().intra_node;
  j["inter_node_bytes"] = s.total().inter_node;
  for (std::size_t i = 0; i < collective_count; ++i) {
    const traffic& t = s.sent[i];
    j[std::string(collective_name(static_cast<collective>(i)))] = {{"intra_node_bytes", t.intra_node},
                                                                   {"inter_node_bytes", t.inter_node}};
  }
  return j;
}

// The bytes this rank handed the transport, per group. A sub-group that is its world itself (world
// size 1, one node, no hpZ) is listed with "same_as" and the world's counters; the totals count
// every group once.
json comm_figures(engine_resources& resources) {
  communicator& world = resources.comm();
  communicator& gradients = resources.gradient_comm();
  json j;
  j["world_size"] = world.size();
  j["rank"] = world.rank();
  json groups;
  groups["world"] = group_figures(world.stats());
  const auto sub = [&](const char* name, communicator& g) {
    json f = group_figures(g.stats());
    if (&g == &world) f["same_as"] = "world";
    groups[name] = std::move(f);
  };
  sub("node_local", world.node_local());
  sub("cross_node", world.cross_node());
  sub("hpz", world.hpz());
  groups["gradient_world"] = group_figures(total_stats(gradients));
  j["groups"] = std::move(groups);
  const json totals = group_figures(comm_traffic(resources));
  for (const auto& [key, value] : totals.items()) j[key] = value;
  return j;
}

}  // namespace

std::string statistics_json(offload_engine& engine) {
  const parameter_swapper_stats params = engine.resources().swapper().stats();
  const coordinator_stats fetches = engine.resources().coord().stats();
  const gradient_path_stats grads = engine.gradients().stats();
  const optimizer_step_totals& optim = engine.optimizer().totals();
  const activation_stats acts = engine.activations().stats();

  json j;
  // Totals over the stages, per tier and direction.
  j["nvme_read_bytes"] = params.bytes_read + grads.bytes_read + optim.bytes_read + acts.bytes_read;
  j["nvme_write_bytes"] = grads.bytes_written + optim.bytes_written + acts.bytes_written;
  j["host_device_copy_bytes"] =
      params.bytes_copied + params.bytes_staged + grads.bytes_to_host + acts.bytes_to_host + acts.bytes_to_device;
  j["fetch_wait_seconds"] = fetches.wait_seconds;
  j["optimizer_steps"] = engine.scaler().optimizer_steps();
  j["loss_scale"] = engine.loss_scale();
  j["parameters"] = parameter_figures(params);
  j["fetches"] = fetch_figures(fetches);
  j["gradients"] = gradient_figures(grads);
  j["optimizer"] = optimizer_figures(engine.optimizer());
  j["activations"] = activation_figures(acts, engine.plan());
  j["footprint"] = footprint_figures(engine);
  j["comm"] = comm_figures(engine.resources());
  return j.dump();
}

comm_stats comm_traffic(engine_resources& resources) {
  comm_stats all = total_stats(resources.comm());
  all += total_stats(resources.gradient_comm());
  return all;
}

}  // namespace zoe::engine
