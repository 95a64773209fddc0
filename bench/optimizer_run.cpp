#include "optimizer_run.hpp"

#include <algorithm>
#include <iomanip>
#include <iostream>

#include <tbb/global_control.h>

#include "initial_states.hpp"
#include "io_settings.hpp"
#include "support/cache_limits.hpp"
#include "support/counts.hpp"
#include "support/measure.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/engine_resources.hpp"
#include "zoe/engine/optim/optimizer_step.hpp"

namespace zoe::bench {
namespace {

constexpr std::uint64_t default_tensor_numel = 16'000'000;
constexpr const char* tag = "zoe-bench optimizer: ";

// ceil(params / tensor) fp16 tensors of equal shares (the remainder spread over the first), one
// per module: the optimizer does not care how they group, only how large they are.
std::vector<engine::module_spec> make_model(const optimizer_settings& s) {
  const std::uint64_t count = (s.params + s.tensor_numel - 1) / s.tensor_numel;
  std::vector<engine::module_spec> out;
  for (std::uint64_t k = 0; k < count; ++k) {
    const std::uint64_t numel = s.params / count + (k < s.params % count ? 1 : 0);
    out.push_back({str("layer", k), {{str("layer", k, ".weight"), {numel}, kernels::dtype::fp16}}});
  }
  return out;
}

// Bytes one step's Adam reads and writes: master and both moments read and written, the gradient
// read, the working copy written (padding included: the kernel steps whole shards), as zoe-bench
// adam counts them.
std::uint64_t adam_bytes(const engine::model_layout& layout) {
  std::uint64_t out = 0;
  for (const auto& p : layout.parameters()) {
    out +=
        2 * (engine::state_bytes(p, engine::state_kind::master) + engine::state_bytes(p, engine::state_kind::exp_avg) +
             engine::state_bytes(p, engine::state_kind::exp_avg_sq)) +
        engine::state_bytes(p, engine::state_kind::gradient) + engine::state_bytes(p, engine::state_kind::working);
  }
  return out;
}

std::uint64_t bytes_on_nvme(engine::engine_resources& resources) {
  std::uint64_t out = 0;
  for (const auto& p : resources.layout().parameters()) {
    for (const engine::state_kind s : engine::all_states) {
      const engine::state_location& home = resources.tiers().location(p.id, s);
      if (home.where == engine::tier::nvme) out += home.bytes;
    }
  }
  return out;
}

// The seconds that stand for a run of `which` alone: the call's wall-clock time, except for Adam
// alone, where it is the time Adam ran: run_stages steps copies of the in-memory states, so that
// it changes nothing, and that copying is no part of a real step.
double stages_seconds(engine::optimizer_step& step, const kernels::adam_config& adam, engine::step_stages which) {
  step.run_stages(adam, which);
  return which.read || which.write ? step.last().seconds : step.last().adam_seconds;
}

constexpr engine::step_stages read_alone{true, false, false};
constexpr engine::step_stages adam_alone{false, true, false};
constexpr engine::step_stages write_alone{false, false, true};
constexpr engine::step_stages read_and_write{true, false, true};

// One round's figures (seconds; memcpy only with the states in memory).
struct round_figures {
  std::vector<double> step, read, adam, write, rw, memcpy, read_wait, write_wait;
};

}  // namespace

std::uint64_t default_sub_group_size(std::uint64_t params, std::uint64_t block_size) {
  const std::uint64_t chunk = std::max<std::uint64_t>(1, block_size / kernels::dtype_size(kernels::dtype::fp16));
  const std::uint64_t share = (params + 31) / 32;
  return std::max<std::uint64_t>(1, (share + chunk - 1) / chunk) * chunk;
}

void optimizer_settings::check() {
  params = parse_count(params_text, "--params");
  ZOE_EXPECTS(steps > 0, "--steps must be positive");
  ZOE_EXPECTS(threads > 0, "--threads must be positive");
  if (offload == "nvme") {
    ZOE_EXPECTS(!path.empty(), "--path is required with --offload nvme (the folder for the optimizer states)");
    check_bench_directory(path);
  }
  tensor_numel = tensor_text ? parse_count(*tensor_text, "--tensor-size")
                             : std::clamp<std::uint64_t>(params / 8, 1, default_tensor_numel);
  ZOE_EXPECTS(tensor_numel <= params, "--tensor-size ", tensor_numel, " is more than --params ", params);
  memcpy_cap = parse_bytes(memcpy_text, "--memcpy-size");
  ZOE_EXPECTS(memcpy_cap > 0, "--memcpy-size must be positive");

  config = {};
  config.zero.stage = 3;
  if (working == "cpu") {
    engine::offload_param_config op;
    op.device = engine::offload_device::cpu;  // pinned host memory (pin_memory's default)
    config.zero.offload_param = op;
  }  // else no offload_param block: the working copies stay on the device
  if (block_text) config.aio.block_size = parse_bytes(*block_text, "--block-size");
  if (queue_depth) config.aio.queue_depth = *queue_depth;
  check_engine_options(config.aio.block_size, config.aio.queue_depth, "--block-size / --queue-depth");
  sub_group_size = sub_group_text ? parse_count(*sub_group_text, "--sub-group-size")
                                  : default_sub_group_size(params, config.aio.block_size);
  config.zero.sub_group_size = sub_group_size;
  engine::offload_optimizer_config oo;
  oo.device = offload == "nvme" ? engine::offload_device::nvme : engine::offload_device::cpu;
  if (oo.device == engine::offload_device::nvme) oo.nvme_path = path;
  oo.pipeline_read = true;
  oo.pipeline_write = true;
  if (buffer_count) oo.buffer_count = *buffer_count;
  config.zero.offload_optimizer = oo;
  config.zoe.io_engine = engine;
  config.zoe.checksums = !no_checksums;
}

nlohmann::json run_optimizer(const optimizer_settings& s) {
  // Adam and the memcpy limit share TBB's threads, as many as --threads.
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, s.threads);
  device_selection selected = select_device();
  device& dev = *selected.dev;
  std::cerr << tag << "device " << dev.name() << " (" << selected.reason << ")\n";

  engine::engine_resources resources(make_model(s), s.config, dev);
  const engine::footprint_plan& plan = resources.plan();
  const engine::model_layout& layout = resources.layout();
  const bool nvme = s.offload == "nvme";
  const std::uint64_t step_bytes = adam_bytes(layout);
  const std::uint64_t nvme_bytes = bytes_on_nvme(resources);
  const std::vector<engine::sub_group> groups = engine::sub_groups(layout, s.sub_group_size);
  std::uint64_t largest_group = 0;
  for (const auto& g : groups) largest_group = std::max(largest_group, g.shard_numel);
  std::cerr << tag << s.params << " parameters in " << layout.parameters().size() << " fp16 tensors of up to "
            << s.tensor_numel << " elements " << (s.working == "cpu" ? "in pinned host memory" : "on the device")
            << "; master, exp_avg, exp_avg_sq "
            << (nvme ? "on nvme under " + s.path : std::string("in pinned host memory"))
            << ", gradients in pinned host memory\n"
            << tag << "sub_group_size " << s.sub_group_size
            << (s.sub_group_text ? "" : " (1/32 of the parameters in whole chunks)") << ": " << groups.size()
            << " sub-groups of up to " << largest_group
            << " elements (whole parameters); plan: " << format_bytes(plan.pinned_bytes) << " pinned ("
            << plan.optimizer_buffer_count << " optimizer buffers of " << format_bytes(plan.optimizer_buffer_bytes)
            << "), " << format_bytes(plan.optimizer_undo_bytes) << " undo log\n";
  std::cerr << tag << "writing initial states (" << format_bytes(step_bytes) << " stepped per step, "
            << format_bytes(nvme_bytes) << " of it on nvme)\n";
  (void)write_initial_states(resources, dev);

  engine::optimizer_step step(resources.tiers(), dev, resources.pinned(), &resources.movers(),
                              {.sub_group_size = s.sub_group_size,
                               .buffer_count = static_cast<std::size_t>(plan.optimizer_buffer_count),
                               .buffer_bytes = static_cast<std::size_t>(plan.optimizer_buffer_bytes),
                               .undo_bytes = plan.optimizer_undo_bytes,
                               .pipeline_read = true,
                               .pipeline_write = true,
                               .adam_threads = {}});
  kernels::adam_config adam;
  adam.weight_decay = 0.01f;

  // The memcpy limit (states in memory): as many bytes moved as the step's Adam moves (half
  // copied: read plus written), up to --memcpy-size copied, in the pinned huge-page memory the
  // pool uses, on the threads Adam uses. Allocated before anything is timed.
  std::optional<memcpy_probe> probe;
  std::optional<cache_fit> fit;
  if (!nvme) {
    fit = check_working_set(step_bytes, "zoe-bench optimizer");
    probe.emplace(streaming_memcpy_probe(std::min(step_bytes / 2, s.memcpy_cap), s.threads));
  }

  // Untimed: thread start-up, first touches of the slots and the undo log, the drive's first writes
  // of the shadow extents.
  std::cerr << tag << "warm-up\n";
  step.run(adam);
  if (nvme) {
    for (const engine::step_stages which : {read_alone, adam_alone, write_alone})
      (void)stages_seconds(step, adam, which);
  } else {
    (void)stages_seconds(step, adam, adam_alone);
    (void)probe->run_once();
  }

  // Rounds alternate the step with each stage alone (and the memcpy), so on a shared machine all
  // see the same load; each figure is the median over the rounds.
  round_figures f;
  engine::optimizer_step_stats last_step;
  for (int round = 1; round <= s.steps; ++round) {
    adam.step = round + 1;
    step.run(adam);
    last_step = step.last();
    f.step.push_back(last_step.seconds);
    f.read_wait.push_back(last_step.read_wait_seconds);
    f.write_wait.push_back(last_step.write_wait_seconds);
    f.adam.push_back(stages_seconds(step, adam, adam_alone));
    if (nvme) {
      f.read.push_back(stages_seconds(step, adam, read_alone));
      f.write.push_back(stages_seconds(step, adam, write_alone));
      f.rw.push_back(stages_seconds(step, adam, read_and_write));
    } else {
      f.memcpy.push_back(probe->run_once());
    }
    std::cerr << tag << "round " << round << "/" << s.steps << ": step " << std::fixed << std::setprecision(3)
              << f.step.back() << " s; alone: adam " << f.adam.back() << " s";
    if (nvme) {
      std::cerr << ", read " << f.read.back() << " s, write " << f.write.back() << " s, read+write " << f.rw.back()
                << " s\n";
    } else {
      std::cerr << "; memcpy " << std::setprecision(2) << probe->gib_per_s(f.memcpy.back()) << " GiB/s\n";
    }
  }

  const double step_s = median(f.step);
  const double adam_s = median(f.adam);
  const double rw_s = median(f.rw);  // 0 without nvme: nothing to read or write
  const double bound_s = std::max(adam_s, rw_s);
  nlohmann::json j{{"bench", "optimizer"},
                   {"device", dev.name()},
                   {"params", s.params},
                   {"tensors", layout.parameters().size()},
                   {"tensor_size", s.tensor_numel},
                   {"offload", s.offload},
                   {"working", s.working},
                   {"sub_group_size", s.sub_group_size},
                   {"sub_groups", groups.size()},
                   {"largest_sub_group", largest_group},
                   {"block_size", s.config.aio.block_size},
                   {"queue_depth", s.config.aio.queue_depth},
                   {"buffer_count", plan.optimizer_buffer_count},
                   {"buffer_bytes", plan.optimizer_buffer_bytes},
                   {"checksums", s.config.zoe.checksums},
                   {"threads", s.threads},
                   {"steps", s.steps},
                   {"step_bytes", step_bytes},
                   {"nvme_state_bytes", nvme_bytes},
                   {"step_s", step_s},
                   {"read_s", median(f.read)},
                   {"adam_s", adam_s},
                   {"write_s", median(f.write)},
                   {"rw_s", rw_s},
                   {"bound_s", bound_s},
                   {"overlap_efficiency", bound_s / step_s},
                   {"read_wait_s", median(f.read_wait)},
                   {"write_wait_s", median(f.write_wait)},
                   {"bytes_read", last_step.bytes_read},
                   {"bytes_written", last_step.bytes_written},
                   {"pieces", last_step.pieces},
                   {"max_pieces_in_flight", last_step.max_pieces_in_flight},
                   {"undo_bytes", last_step.undo_bytes},
                   {"pinned_bytes", resources.pinned().peak_bytes_in_use()},
                   {"step_pinned_bytes", last_step.pinned_bytes},
                   {"planned_pinned_bytes", plan.pinned_bytes}};
  if (probe) {
    const double step_rate = static_cast<double>(step_bytes) / step_s;
    const double memcpy_rate = static_cast<double>(2 * probe->bytes()) / median(f.memcpy);
    j.update({{"step_bytes_per_s", step_rate},
              {"memcpy_bytes_per_s", memcpy_rate},
              {"fraction_of_memcpy", step_rate / memcpy_rate},
              {"memcpy", to_json(*probe)}});
    j.update(to_json(*fit));
  }
  return j;
}

void print_optimizer(const optimizer_settings& s, const nlohmann::json& r) {
  if (s.json) {
    std::cout << r.dump() << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(3) << "optimizer: " << r["params"].get<std::uint64_t>()
            << " parameters, states " << (s.offload == "nvme" ? "on nvme" : "in pinned host memory") << ", "
            << r["sub_groups"].get<std::size_t>() << " sub-groups of up to "
            << r["largest_sub_group"].get<std::uint64_t>() << " elements (sub_group_size "
            << r["sub_group_size"].get<std::uint64_t>() << ")\n"
            << "step " << r["step_s"].get<double>() << " s; alone: adam " << r["adam_s"].get<double>() << " s, read "
            << r["read_s"].get<double>() << " s, write " << r["write_s"].get<double>() << " s, read+write "
            << r["rw_s"].get<double>() << " s; bound " << r["bound_s"].get<double>() << " s, overlap efficiency "
            << r["overlap_efficiency"].get<double>() << "\n";
  if (r.contains("fraction_of_memcpy")) {
    const double gib = static_cast<double>(std::uint64_t{1} << 30);
    std::cout << std::setprecision(2) << "step " << r["step_bytes_per_s"].get<double>() / gib << " GiB/s, memcpy "
              << r["memcpy_bytes_per_s"].get<double>() / gib << " GiB/s on the same threads: fraction "
              << std::setprecision(3) << r["fraction_of_memcpy"].get<double>() << "\n";
  }
  std::cout << "pinned " << format_bytes(r["pinned_bytes"].get<std::uint64_t>()) << " peak (the step's slots "
            << format_bytes(r["step_pinned_bytes"].get<std::uint64_t>()) << ") of "
            << format_bytes(r["planned_pinned_bytes"].get<std::uint64_t>()) << " planned\n";
}

}  // namespace zoe::bench
