// `zoe-bench params`: ZeRO-3 parameter fetch with prefetch from NVMe against raw reads (params_run.hpp).
#include <memory>

#include "commands.hpp"
#include "params_run.hpp"
#include "zoe/io/engine_factory.hpp"

namespace zoe::bench {

void add_params_command(CLI::App& app) {
  auto s = std::make_shared<params_settings>();
  CLI::App* cmd = app.add_subcommand("params", "ZeRO-3 parameter fetch with prefetch from NVMe against raw reads");
  cmd->footer(
      "Keeps the working copies of a model of --params parameters in --layers layers on NVMe under DIR (a swap store, "
      "with DeepSpeed's offload_param and aio defaults unless flags change them) and fetches them layer after layer, "
      "as a forward pass does, while a simulated compute sleeps --compute-ms per layer. One step records the trace; "
      "each timed step follows it with prefetch and alternates with a raw read of the same bytes through the I/O "
      "engine (DIR/zoe-bench.dat, same block size and queue depth, pinned huge-page buffers). Figures are medians "
      "over the timed steps. Exit 2: bad flags; exit 1: I/O or memory error.");
  cmd->add_option("--params", s->params_text, "parameters in all (e.g. 256M, 1.3G)")->capture_default_str();
  cmd->add_option("--layers", s->layers, "layers (modules fetched in order)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--per-layer", s->per_layer, "parameter tensors per layer")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--path", s->path, "directory for the swap store and the raw file (a real drive, not tmpfs)")
      ->required();
  cmd->add_option("--compute-ms", s->compute_ms,
                  "simulated compute per layer in ms (default: 1.5x a raw read of one layer, measured first)");
  cmd->add_option("--steps", s->steps, "timed steps")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--dtype", s->dtype, "working copy type")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32"}))
      ->capture_default_str();
  cmd->add_option("--buffer-count", s->buffer_count, "zero_optimization.offload_param.buffer_count (default 5)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--buffer-size", s->buffer_size, "zero_optimization.offload_param.buffer_size in elements (1e8)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--block-size", s->block_text, "aio.block_size (default 1MiB)");
  cmd->add_option("--queue-depth", s->queue_depth, "aio.queue_depth (default 8)")->check(CLI::Range(1, 4096));
  cmd->add_option("--engine", s->engine, "I/O backend")
      ->check(CLI::IsMember(io::available_backends_and_auto()))
      ->capture_default_str();
  cmd->add_flag("--no-checksums", s->no_checksums,
                "zoe.swap.checksums false: the swap store neither records nor verifies chunk checksums");
  cmd->add_flag("--json", s->json, "print one JSON object instead of the readable lines");
  cmd->callback([s] {
    s->check();
    print_params(*s, run_params(*s));
  });
}

}  // namespace zoe::bench
