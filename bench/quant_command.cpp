// `zoe-bench quant`: block quantization speed and accuracy, against memcpy on the same threads.
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include "commands.hpp"
#include "support/measure.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cpu_path.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::bench {
namespace {

struct quant_settings {
  std::string elems_text = "64M";
  int bits = 8;
  std::size_t block = 2048;
  std::string dtype = "fp16";
  bool asymmetric = false;
  std::uint64_t seed = 1;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::string path = "auto";
  int loops = 7;
  bool json = false;
};

// N(0, 1) with one element in 10,000 multiplied by 10 (weights have outliers), reproducible from
// the seed whatever the thread count: each 1 Mi-element piece has its own generator.
std::vector<float> outlier_data(std::size_t n, std::uint64_t seed) {
  std::vector<float> x(n);
  constexpr std::size_t piece = std::size_t{1} << 20;
  tbb::parallel_for(std::size_t{0}, (n + piece - 1) / piece, [&](std::size_t p) {
    std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + p);
    std::normal_distribution<float> normal;
    std::bernoulli_distribution outlier(1e-4);
    for (std::size_t i = p * piece; i < std::min(n, (p + 1) * piece); ++i) x[i] = normal(rng) * (outlier(rng) ? 10.0f : 1.0f);
  });
  return x;
}

// ||x - deq(q(x))|| / ||x|| for one configuration, x given exactly as fp32 (the input's values).
double relative_error(const std::vector<float>& exact, kernels::const_tensor_view input, const kernels::quant_config& c) {
  const std::size_t n = input.count;
  std::vector<std::byte> codes(c.code_bytes(n));
  std::vector<float> scales(c.blocks(n)), zero_points(c.symmetric ? 0 : c.blocks(n)), back(n);
  kernels::quantize(input, c, {codes, scales, zero_points});
  kernels::dequantize({codes, scales, zero_points}, c, kernels::view(std::span<float>(back)));
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(exact[i]) - back[i];
    err += d * d;
    norm += static_cast<double>(exact[i]) * exact[i];
  }
  return std::sqrt(err / norm);
}

void run_quant(const quant_settings& s) {
  const std::size_t n = parse_bytes(s.elems_text, "--elems");
  ZOE_EXPECTS(n > 0, "--elems must be at least 1");
  const kernels::dtype type = kernels::parse_dtype(s.dtype, "--dtype");
  const kernels::quant_config config{s.bits, s.block, !s.asymmetric};
  config.validate();
  kernels::set_cpu_path(kernels::parse_cpu_path(s.path, "--path"));
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, s.threads);

  std::cerr << "zoe-bench quant: generating " << n << " elements (seed " << s.seed << ")\n";
  const std::vector<float> values = outlier_data(n, s.seed);
  std::vector<std::byte> input(n * kernels::dtype_size(type));
  kernels::cast(kernels::view(std::span<const float>(values)), kernels::tensor_view{type, input.data(), n});
  std::vector<float> exact(n);
  kernels::cast(kernels::const_tensor_view{type, input.data(), n}, kernels::view(std::span<float>(exact)));
  const kernels::const_tensor_view in{type, input.data(), n};

  // The codes go to a 64-byte aligned buffer, as a pinned host or device buffer is; the kernel
  // streams them out with aligned non-temporal stores there (and stages them when unaligned).
  std::vector<std::byte> code_storage(config.code_bytes(n) + 64);
  void* code_start = code_storage.data();
  std::size_t code_space = code_storage.size();
  const std::span<std::byte> codes(static_cast<std::byte*>(std::align(64, config.code_bytes(n), code_start, code_space)),
                                   config.code_bytes(n));
  std::vector<float> scales(config.blocks(n)), zero_points(config.symmetric ? 0 : config.blocks(n));
  std::memset(codes.data(), 0, codes.size());  // fault the pages in before timing
  const std::size_t moved = input.size() + codes.size() + (scales.size() + zero_points.size()) * sizeof(float);
  // Quantization passes alternate with memcpy passes on the same threads, after one untimed pass of
  // each (thread start-up, first touches), and medians are compared with medians: on a shared
  // machine the load changes during a run, and both figures should see the same load.
  // The limit is a large memcpy, as for Adam: glibc copies calls above its non-temporal threshold
  // (~180 MiB) with streaming stores, 1.5-2x faster than a smaller copy, and that is what the
  // machine can move.
  memcpy_probe probe(std::max<std::size_t>(input.size(), GiB), s.threads);
  const auto [med, memcpy_rate] =
      alternate_with_memcpy(probe, s.loops, [&](int) { kernels::quantize(in, config, {codes, scales, zero_points}); });
  const double rate = gib_per_s(moved, med);

  std::cerr << "zoe-bench quant: measuring the error with block and whole-tensor scales\n";
  const double rel_block = relative_error(exact, in, config);
  const double rel_tensor = relative_error(exact, in, {s.bits, (n + 7) / 8 * 8, !s.asymmetric});
  const std::string path(kernels::cpu_path_name(kernels::active_cpu_path()));
  if (s.json) {
    const nlohmann::json j{{"bench", "quant"},
                           {"elems", n},
                           {"bits", s.bits},
                           {"block", s.block},
                           {"dtype", kernels::dtype_name(type)},
                           {"symmetric", !s.asymmetric},
                           {"seed", s.seed},
                           {"threads", s.threads},
                           {"path", path},
                           {"loops", s.loops},
                           {"seconds", med},
                           {"gib_per_s", rate},
                           {"memcpy_gib_per_s", memcpy_rate},
                           {"fraction_of_memcpy", rate / memcpy_rate},
                           {"rel_error_block", rel_block},
                           {"rel_error_tensor", rel_tensor}};
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(4) << "quant int" << s.bits << " " << kernels::dtype_name(type)
            << " block " << s.block << " x " << n << " on " << s.threads << " threads, " << path << ": " << med << " s, "
            << std::setprecision(2) << rate << " GiB/s; memcpy " << memcpy_rate << " GiB/s; fraction "
            << std::setprecision(3) << rate / memcpy_rate << "; rel error block " << std::scientific
            << std::setprecision(3) << rel_block << ", tensor " << rel_tensor << "\n";
}

}  // namespace

void add_quant_command(CLI::App& app) {
  auto settings = std::make_shared<quant_settings>();
  CLI::App* cmd = app.add_subcommand("quant", "block quantization speed against memcpy, and its accuracy");
  cmd->footer(
      "Block quantization of N(0,1) data with one element in 10,000 scaled by 10: the median time of several "
      "passes (bytes: input + codes + scales) alternating with memcpy on the same threads, and the relative "
      "error with block scales and with one scale for the whole tensor.");
  cmd->add_option("--elems", settings->elems_text, "elements (K, M, G count in powers of 1024)")->capture_default_str();
  cmd->add_option("--bits", settings->bits, "code width")->check(CLI::IsMember({4, 8}))->capture_default_str();
  cmd->add_option("--block", settings->block, "elements per block (a multiple of 8)")->capture_default_str();
  // The type name is checked by kernels::parse_dtype, which also takes float32, float16, bfloat16.
  cmd->add_option("--dtype", settings->dtype, "input type: fp32, fp16 or bf16")->capture_default_str();
  cmd->add_flag("--asymmetric", settings->asymmetric, "zero point per block instead of symmetric codes");
  cmd->add_option("--seed", settings->seed, "seed of the data")->capture_default_str();
  cmd->add_option("--threads", settings->threads, "threads")->check(CLI::Range(1u, 1024u))->capture_default_str();
  cmd->add_option("--path", settings->path, "CPU path (auto, scalar, sse4, avx2, avx512)")->capture_default_str();
  cmd->add_option("--loops", settings->loops, "timed passes")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_flag("--json", settings->json, "print one JSON object instead of the line");
  cmd->callback([settings] { run_quant(*settings); });
}

}  // namespace zoe::bench
