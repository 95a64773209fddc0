// `zoe-bench quant`: block quantization, dequantization and qgZ reduction speed, each against memcpy
// on the same threads, and the accuracy of block scales.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include "commands.hpp"
#include "support/cache_limits.hpp"
#include "support/host_buffer.hpp"
#include "support/measure.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cpu_path.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::bench {
namespace {

struct quant_settings {
  std::string elems_text = "128M";
  int bits = 8;
  std::size_t block = 2048;
  std::string dtype = "fp16";
  bool asymmetric = false;
  std::uint64_t seed = 1;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::string path = "auto";
  int inputs = 4;
  int loops = 7;
  std::string memcpy_text = "1GiB";
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
    for (std::size_t i = p * piece; i < std::min(n, (p + 1) * piece); ++i)
      x[i] = normal(rng) * (outlier(rng) ? 10.0f : 1.0f);
  });
  return x;
}

// ||x - deq(q(x))|| / ||x|| for one configuration, x given exactly as fp32 (the input's values).
double relative_error(const std::vector<float>& exact, kernels::const_tensor_view input,
                      const kernels::quant_config& c) {
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

// A quantized tensor in benchmark memory (locked, huge pages): codes, scales, zero points.
class quantized_buffers {
 public:
  quantized_buffers(const kernels::quant_config& c, std::size_t n)
      : codes_(c.code_bytes(n)),
        scales_(c.blocks(n) * sizeof(float)),
        zero_points_(c.symmetric ? 0 : c.blocks(n) * sizeof(float)) {}

  [[nodiscard]] kernels::quantized_span span() const noexcept {
    return {codes_.span(), floats(scales_), floats(zero_points_)};
  }
  [[nodiscard]] std::uint64_t bytes() const noexcept {
    return codes_.span().size() + scales_.span().size() + zero_points_.span().size();
  }
  /// Copies `other`'s contents (same configuration and count).
  void copy_from(const quantized_buffers& other) const {
    std::ranges::copy(other.codes_.span(), codes_.span().begin());
    std::ranges::copy(other.scales_.span(), scales_.span().begin());
    std::ranges::copy(other.zero_points_.span(), zero_points_.span().begin());
  }

 private:
  static std::span<float> floats(const host_buffer& b) noexcept {
    return {reinterpret_cast<float*>(b.span().data()), b.span().size() / sizeof(float)};
  }
  host_buffer codes_, scales_, zero_points_;
};

// One kernel timed in alternation with the memcpy limit: its median and the memcpy's.
struct timed_kernel {
  double seconds = 0;
  std::uint64_t bytes = 0;  // read plus written by one call
  double memcpy_gib_per_s = 0;
  cache_fit fit;

  [[nodiscard]] double gib_per_s() const { return bench::gib_per_s(bytes, seconds); }
  [[nodiscard]] double fraction() const { return gib_per_s() / memcpy_gib_per_s; }
  [[nodiscard]] nlohmann::json json() const {
    nlohmann::json j{{"seconds", seconds},
                     {"bytes", bytes},
                     {"gib_per_s", gib_per_s()},
                     {"memcpy_gib_per_s", memcpy_gib_per_s},
                     {"fraction_of_memcpy", fraction()}};
    j.update(to_json(fit));
    return j;
  }
};

// Quantization passes alternate with memcpy passes on the same threads, after one untimed pass of
// each (thread start-up, first touches), and medians are compared with medians: on a shared
// machine the load changes during a run, and both figures should see the same load.
timed_kernel time_kernel(memcpy_probe& probe, int loops, std::uint64_t bytes, std::string_view name,
                         const std::function<void()>& kernel) {
  timed_kernel t;
  t.bytes = bytes;
  t.fit = check_working_set(bytes, str("zoe-bench quant ", name));
  std::cerr << "zoe-bench quant: timing " << name << " (" << format_bytes(bytes) << " per call)\n";
  const auto [med, memcpy_rate] = alternate_with_memcpy(probe, loops, [&](int) { kernel(); });
  t.seconds = med;
  t.memcpy_gib_per_s = memcpy_rate;
  return t;
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
  const host_buffer input(n * kernels::dtype_size(type));
  const kernels::const_tensor_view in{type, input.span().data(), n};
  kernels::cast(kernels::view(std::span<const float>(outlier_data(n, s.seed))),
                kernels::tensor_view{type, input.span().data(), n});

  // Every buffer a kernel touches is the locked, huge-page memory the memcpy limit copies; the
  // codes start page-aligned, as in a pinned host or device buffer, where the kernel streams them
  // out with aligned non-temporal stores.
  const quantized_buffers quantized(config, n);
  const host_buffer dequantized(n * kernels::dtype_size(type));
  const kernels::tensor_view deq_out{type, dequantized.span().data(), n};
  // qgZ's reduction reads one quantized chunk per rank. Each input has its own memory (one buffer
  // read `inputs` times would be served from cache); their values may repeat, speed does not
  // depend on them.
  kernels::quantize(in, config, quantized.span());
  std::vector<std::unique_ptr<quantized_buffers>> rank_chunks;
  std::vector<kernels::const_quantized_span> rank_spans;
  for (int r = 0; r < s.inputs; ++r) {
    rank_chunks.push_back(std::make_unique<quantized_buffers>(config, n));
    rank_chunks.back()->copy_from(quantized);
    rank_spans.emplace_back(rank_chunks.back()->span());
  }
  const quantized_buffers reduced(config, n);
  const float post_scale = 1.0f / static_cast<float>(s.inputs);

  memcpy_probe probe = streaming_memcpy_probe(parse_bytes(s.memcpy_text, "--memcpy-size"), s.threads);
  const std::uint64_t q_bytes = quantized.bytes();
  const timed_kernel quantize = time_kernel(probe, s.loops, input.span().size() + q_bytes, "quantize",
                                            [&] { kernels::quantize(in, config, quantized.span()); });
  const timed_kernel dequantize = time_kernel(probe, s.loops, q_bytes + dequantized.span().size(), "dequantize",
                                              [&] { kernels::dequantize(quantized.span(), config, deq_out); });
  const timed_kernel reduce =
      time_kernel(probe, s.loops, (static_cast<std::uint64_t>(s.inputs) + 1) * q_bytes, "reduce_requantize",
                  [&] { kernels::reduce_requantize(rank_spans, config, n, post_scale, config, reduced.span()); });

  std::cerr << "zoe-bench quant: measuring the error with block and whole-tensor scales\n";
  std::vector<float> exact(n);
  kernels::cast(in, kernels::view(std::span<float>(exact)));
  const double rel_block = relative_error(exact, in, config);
  const double rel_tensor = relative_error(exact, in, {s.bits, (n + 7) / 8 * 8, !s.asymmetric});
  const std::string path(kernels::cpu_path_name(kernels::active_cpu_path()));
  if (s.json) {
    nlohmann::json reduce_json = reduce.json();
    reduce_json["inputs"] = s.inputs;
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
                           {"quantize", quantize.json()},
                           {"dequantize", dequantize.json()},
                           {"reduce_requantize", reduce_json},
                           {"memcpy", to_json(probe)},
                           {"rel_error_block", rel_block},
                           {"rel_error_tensor", rel_tensor}};
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << "quant int" << s.bits << " " << kernels::dtype_name(type) << " block " << s.block << " x " << n << " on "
            << s.threads << " threads, " << path << ":\n";
  for (const auto& [name, t] : {std::pair<const char*, const timed_kernel&>{"quantize", quantize},
                                {"dequantize", dequantize},
                                {"reduce_requantize", reduce}}) {
    std::cout << "  " << name << ": " << std::fixed << std::setprecision(4) << t.seconds << " s, "
              << std::setprecision(2) << t.gib_per_s() << " GiB/s; memcpy " << t.memcpy_gib_per_s << " GiB/s; fraction "
              << std::setprecision(3) << t.fraction()
              << (t.fit.fits() ? " (the working set fits the last-level cache)" : "") << "\n";
  }
  std::cout << "  rel error block " << std::scientific << std::setprecision(3) << rel_block << ", tensor " << rel_tensor
            << "\n";
}

}  // namespace

void add_quant_command(CLI::App& app) {
  auto settings = std::make_shared<quant_settings>();
  CLI::App* cmd = app.add_subcommand("quant", "block quantization speed against memcpy, and its accuracy");
  cmd->footer(
      "Block quantization of N(0,1) data with one element in 10,000 scaled by 10: for quantize, dequantize and "
      "reduce_requantize (qgZ's reduction of --inputs chunks), the median time of several calls (bytes: everything "
      "read plus written) alternating with memcpy on the same threads, and the relative error with block scales and "
      "with one scale for the whole tensor.");
  cmd->add_option("--elems", settings->elems_text, "elements (K, M, G count in powers of 1024)")->capture_default_str();
  cmd->add_option("--bits", settings->bits, "code width")->check(CLI::IsMember({4, 8}))->capture_default_str();
  cmd->add_option("--block", settings->block, "elements per block (a multiple of 8)")->capture_default_str();
  // The type name is checked by kernels::parse_dtype, which also takes float32, float16, bfloat16.
  cmd->add_option("--dtype", settings->dtype, "input type: fp32, fp16 or bf16")->capture_default_str();
  cmd->add_flag("--asymmetric", settings->asymmetric, "zero point per block instead of symmetric codes");
  cmd->add_option("--seed", settings->seed, "seed of the data")->capture_default_str();
  cmd->add_option("--threads", settings->threads, "threads")->check(CLI::Range(1u, 1024u))->capture_default_str();
  cmd->add_option("--path", settings->path, "CPU path (auto, scalar, sse4, avx2, avx512)")->capture_default_str();
  cmd->add_option("--inputs", settings->inputs, "quantized chunks reduce_requantize sums (ranks of qgZ)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--loops", settings->loops, "timed passes")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--memcpy-size", settings->memcpy_text,
                  "bytes the memcpy limit copies at least (more where glibc's streaming threshold needs bigger pieces)")
      ->capture_default_str();
  cmd->add_flag("--json", settings->json, "print one JSON object instead of the line");
  cmd->callback([settings] { run_quant(*settings); });
}

}  // namespace zoe::bench
