// `zoe-bench optimizer`: the pipelined optimizer step against each of its stages alone (optimizer_run.hpp).
#include <memory>

#include "commands.hpp"
#include "optimizer_run.hpp"
#include "zoe/io/engine_factory.hpp"

namespace zoe::bench {

void add_optimizer_command(CLI::App& app) {
  auto s = std::make_shared<optimizer_settings>();
  CLI::App* cmd =
      app.add_subcommand("optimizer", "the pipelined optimizer step against each of its stages alone (and memcpy)");
  cmd->footer(
      "Builds a model of --params parameters in fp16 tensors of --tensor-size elements (working copies on the "
      "device, or in pinned host memory with --working cpu), its optimizer states (fp32 master, exp_avg, exp_avg_sq) "
      "on nvme under DIR (offload_optimizer nvme, "
      "pipeline_read and pipeline_write on) or in pinned host memory (offload_optimizer cpu), and random fp16 "
      "gradients in pinned host memory; gives every state random initial values; runs one untimed step and each "
      "stage once, then --steps rounds, each a whole step (step_s) followed by each stage alone over the same data: "
      "Adam alone (adam_s, the time Adam ran), the reads alone (read_s), the writes alone (write_s), reads and "
      "writes together without Adam (rw_s). bound_s = max(adam_s, rw_s), overlap_efficiency = bound_s / step_s "
      "(1: the pipeline hid everything but the slowest side). Figures are medians over the rounds. With --offload "
      "cpu there is nothing to read or write: read_s, write_s and rw_s are 0, and each round also times a memcpy on "
      "the same threads, in the same pinned huge-page memory, of half the bytes the step's Adam reads plus writes "
      "(capped by --memcpy-size), giving step_bytes_per_s, memcpy_bytes_per_s and fraction_of_memcpy. The default "
      "sub-group size is 1/32 of --params rounded up to whole chunks (aio.block_size bytes of fp16: 524288 elements "
      "at 1MiB), e.g. 8388608 for 256M; a sub-group holds whole parameters, so it is never smaller than one tensor. "
      "Exit 2: bad flags; exit 1: I/O or memory error.");
  cmd->add_option("--params", s->params_text, "parameters in all (e.g. 256M, 1.3G)")->capture_default_str();
  cmd->add_option("--offload", s->offload, "where the optimizer states live: nvme (under --path) or cpu (pinned)")
      ->check(CLI::IsMember({"nvme", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--working", s->working,
                  "where the fp16 working copies live: device (ZeRO-Offload's place; the step sends the new ones "
                  "there) or cpu (offload_param cpu: pinned host memory, stepped in place)")
      ->check(CLI::IsMember({"device", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--path", s->path, "folder for the optimizer states with --offload nvme (a real drive, not tmpfs)");
  cmd->add_option("--sub-group-size", s->sub_group_text,
                  "zero_optimization.sub_group_size in elements (default: 1/32 of --params, rounded up to whole "
                  "aio.block_size chunks of fp16)");
  cmd->add_option("--tensor-size", s->tensor_text,
                  "elements per parameter tensor (default 16M, or --params/8 if less)");
  cmd->add_option("--steps", s->steps, "timed rounds (a step, then each stage alone)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--threads", s->threads, "threads for Adam and the memcpy")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  cmd->add_option("--buffer-count", s->buffer_count, "zero_optimization.offload_optimizer.buffer_count (default 4)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--block-size", s->block_text, "aio.block_size (default 1MiB)");
  cmd->add_option("--queue-depth", s->queue_depth, "aio.queue_depth (default 8)")->check(CLI::Range(1, 4096));
  cmd->add_option("--engine", s->engine, "I/O backend")
      ->check(CLI::IsMember(io::available_backends_and_auto()))
      ->capture_default_str();
  cmd->add_flag("--no-checksums", s->no_checksums,
                "zoe.swap.checksums false: the swap store neither records nor verifies chunk checksums");
  cmd->add_option("--memcpy-size", s->memcpy_text, "the most the memcpy limit copies per run (--offload cpu)")
      ->capture_default_str();
  cmd->add_flag("--json", s->json, "print one JSON object instead of the readable lines");
  cmd->callback([s] {
    s->check();
    print_optimizer(*s, run_optimizer(*s));
  });
}

}  // namespace zoe::bench
