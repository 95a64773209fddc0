// `zoe-bench adam`: one Adam step over a shard in memory, against memcpy on the same threads.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>
#include <tbb/global_control.h>

#include "commands.hpp"
#include "support/cache_limits.hpp"
#include "support/host_buffer.hpp"
#include "support/measure.hpp"
#include "support/uniform_fill.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"
#include "zoe/kernels/adam.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cpu_path.hpp"

namespace zoe::bench {
namespace {

struct adam_settings {
  std::string params_text = "256M";
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::string grad_dtype = "fp32";
  std::string param_dtype = "fp16";
  std::string path = "auto";
  int steps = 7;
  std::string memcpy_text = "1GiB";
  bool json = false;
};

void run_adam(const adam_settings& s) {
  const std::size_t n = parse_bytes(s.params_text, "--params");
  ZOE_EXPECTS(n > 0, "--params must be at least 1");
  const kernels::dtype grad_type = kernels::parse_dtype(s.grad_dtype, "--grad-dtype");
  const kernels::dtype param_type = kernels::parse_dtype(s.param_dtype, "--param-dtype");
  kernels::set_cpu_path(kernels::parse_cpu_path(s.path, "--path"));
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, s.threads);

  const std::size_t grad_bytes = kernels::dtype_size(grad_type);
  const std::size_t working_bytes = param_type == kernels::dtype::fp32 ? 0 : kernels::dtype_size(param_type);
  // In place: params, exp_avg, exp_avg_sq are read and written; the gradient read; the working copy written.
  const std::size_t bytes_per_param = 3 * 4 * 2 + grad_bytes + working_bytes;

  std::cerr << "zoe-bench adam: allocating " << format_bytes(n * (12 + grad_bytes + working_bytes)) << "\n";
  host_buffer params(n * 4), exp_avg(n * 4), exp_avg_sq(n * 4), grad(n * grad_bytes);
  std::optional<host_buffer> working;
  if (working_bytes != 0) working.emplace(n * working_bytes);
  const auto floats = [n](const host_buffer& b) { return std::span(reinterpret_cast<float*>(b.span().data()), n); };
  uniform_fill(floats(params), -1.0f, 1.0f, 1);
  uniform_fill(floats(exp_avg), -1e-3f, 1e-3f, 2);
  uniform_fill(floats(exp_avg_sq), 1e-8f, 1e-6f, 3);
  {
    std::vector<float> g(std::min<std::size_t>(n, 1 << 20));
    uniform_fill(g, -1e-2f, 1e-2f, 4);
    for (std::size_t i = 0; i < n; i += g.size()) {
      const std::size_t len = std::min(g.size(), n - i);
      kernels::cast(kernels::const_tensor_view{kernels::dtype::fp32, g.data(), len},
                    kernels::tensor_view{grad_type, grad.span().data() + i * grad_bytes, len});
    }
  }

  kernels::adam_shard shard{floats(params), floats(exp_avg), floats(exp_avg_sq),
                            kernels::const_tensor_view{grad_type, grad.span().data(), n}, std::nullopt};
  if (working) shard.working = kernels::tensor_view{param_type, working->span().data(), n};
  kernels::adam_config config;
  config.weight_decay = 0.01f;
  config.grad_scale = 1.0f / 1024.0f;
  // Each Adam step is followed by a memcpy of at least --memcpy-size on the same threads, after one untimed
  // run of each (thread start-up), and the medians are compared: on a shared machine the load
  // changes during a run, and the step and its limit should be measured under the same load.
  const cache_fit fit = check_working_set(std::uint64_t{n} * (12 + grad_bytes + working_bytes), "zoe-bench adam");
  memcpy_probe probe = streaming_memcpy_probe(parse_bytes(s.memcpy_text, "--memcpy-size"), s.threads);
  const auto [med, memcpy_rate] = alternate_with_memcpy(
      probe, s.steps,
      [&](int step) {
        config.step = step + 1;
        kernels::adam_step(config, shard);
      },
      [&](int step, double seconds, double memcpy_gib_per_s) {
        std::cerr << "zoe-bench adam: step " << step << "/" << s.steps << ": " << std::fixed << std::setprecision(4)
                  << seconds << " s, memcpy " << memcpy_gib_per_s << " GiB/s\n";
      });
  const double rate = gib_per_s(std::uint64_t{n} * bytes_per_param, med);
  const std::string path(kernels::cpu_path_name(kernels::active_cpu_path()));
  if (s.json) {
    nlohmann::json j{{"bench", "adam"},
                     {"params", n},
                     {"threads", s.threads},
                     {"grad_dtype", kernels::dtype_name(grad_type)},
                     {"param_dtype", kernels::dtype_name(param_type)},
                     {"path", path},
                     {"steps", s.steps},
                     {"seconds", med},
                     {"params_per_s", static_cast<double>(n) / med},
                     {"bytes_per_param", bytes_per_param},
                     {"gib_per_s", rate},
                     {"memcpy_gib_per_s", memcpy_rate},
                     {"fraction_of_memcpy", rate / memcpy_rate},
                     {"memcpy", to_json(probe)}};
    j.update(to_json(fit));
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(3) << "adam " << n << " params (" << kernels::dtype_name(grad_type)
            << " grad, " << kernels::dtype_name(param_type) << " params) on " << s.threads << " threads, " << path
            << ": " << med << " s/step, " << static_cast<double>(n) / med / 1e9 << " Gparams/s, "
            << std::setprecision(2) << rate << " GiB/s; memcpy " << memcpy_rate << " GiB/s; fraction "
            << std::setprecision(3) << rate / memcpy_rate
            << (fit.fits() ? " (the working set fits the last-level cache)" : "") << "\n";
}

}  // namespace

void add_adam_command(CLI::App& app) {
  auto settings = std::make_shared<adam_settings>();
  CLI::App* cmd = app.add_subcommand("adam", "CPU Adam(W) step speed against memcpy on the same threads");
  cmd->footer(
      "One Adam(W) step over a shard in locked memory (fp32 master, moments, gradient, working copy), timed as "
      "the median of several steps alternating with a memcpy on the same threads. Bandwidth counts bytes read "
      "plus written, for Adam and for memcpy alike.");
  cmd->add_option("--params", settings->params_text, "parameters in the shard (K, M, G count in powers of 1024)")
      ->capture_default_str();
  cmd->add_option("--threads", settings->threads, "threads")->check(CLI::Range(1u, 1024u))->capture_default_str();
  // The type names are checked by kernels::parse_dtype, which also takes float32, float16, bfloat16.
  cmd->add_option("--grad-dtype", settings->grad_dtype, "gradient type: fp32, fp16 or bf16")->capture_default_str();
  cmd->add_option("--param-dtype", settings->param_dtype,
                  "working copy type: fp32 (none, the master is the weights), fp16 or bf16")
      ->capture_default_str();
  cmd->add_option("--path", settings->path, "CPU path (auto, scalar, sse4, avx2, avx512)")->capture_default_str();
  cmd->add_option("--steps", settings->steps, "timed steps")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--memcpy-size", settings->memcpy_text,
                  "bytes the memcpy limit copies at least (more where glibc's streaming threshold needs bigger pieces)")
      ->capture_default_str();
  cmd->add_flag("--json", settings->json, "print one JSON object instead of the line");
  cmd->callback([settings] { run_adam(*settings); });
}

}  // namespace zoe::bench
