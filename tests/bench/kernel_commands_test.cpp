// zoe-bench adam and quant as a user runs them: each figure beside its memcpy limit, the limit's
// shape (pieces above glibc's streaming threshold, in benchmark memory) and the cache check.
#include <gtest/gtest.h>

#include "bench_process.hpp"

namespace zoe::testing {
namespace {

// A memcpy size far below the streaming threshold, so the pieces are the threshold's size.
const std::string small_limit = " --memcpy-size 1MiB --json";

nlohmann::json only_json(const run_result& r) {
  const auto lines = json_lines(r.output);
  EXPECT_EQ(lines.size(), 1u) << r.output;
  return lines.empty() ? nlohmann::json::object() : lines.front();
}

void expect_streaming_limit(const nlohmann::json& memcpy, unsigned threads) {
  EXPECT_EQ(memcpy.at("pieces"), threads) << memcpy.dump();
  EXPECT_GT(memcpy.at("piece_bytes").get<std::uint64_t>(),
            memcpy.at("non_temporal_threshold_bytes").get<std::uint64_t>())
      << memcpy.dump();
  EXPECT_EQ(memcpy.at("bytes").get<std::uint64_t>(), threads * memcpy.at("piece_bytes").get<std::uint64_t>());
  EXPECT_TRUE(memcpy.at("huge_pages").is_boolean()) << memcpy.dump();
  EXPECT_TRUE(memcpy.at("locked").is_boolean()) << memcpy.dump();
  EXPECT_FALSE(memcpy.at("non_temporal_threshold_source").get<std::string>().empty());
}

void expect_rates(const nlohmann::json& t) {
  EXPECT_GT(t.at("seconds").get<double>(), 0.0) << t.dump();
  EXPECT_GT(t.at("memcpy_gib_per_s").get<double>(), 0.0) << t.dump();
  const double rate = t.at("gib_per_s").get<double>();
  EXPECT_NEAR(rate, t.at("bytes").get<double>() / t.at("seconds").get<double>() / (1 << 30), rate * 1e-9) << t.dump();
  EXPECT_NEAR(t.at("fraction_of_memcpy").get<double>(), rate / t.at("memcpy_gib_per_s").get<double>(), 1e-9)
      << t.dump();
}

TEST(adam_command, JsonCarriesTheStreamingMemcpyLimitAndFlagsACacheSizedShard) {
  const auto r = run("adam --params 64K --threads 2 --steps 1 --grad-dtype fp32 --param-dtype fp16" + small_limit);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = only_json(r);
  expect_streaming_limit(j.at("memcpy"), 2);
  EXPECT_EQ(j.at("working_set_bytes"), 65536 * (12 + 4 + 2)) << j.dump();
  if (j.at("llc_bytes") == 0) GTEST_SKIP() << "no last-level cache size known here";
  EXPECT_TRUE(j.at("fits_llc").get<bool>()) << j.dump();
  EXPECT_NE(r.output.find("fits the last-level cache"), std::string::npos) << r.output;
}

TEST(adam_command, AMemcpyLimitBeyondHalfTheMemoryExitsTwoNamingThreads) {
  // 1024 pieces above glibc's streaming threshold (at least 16 KiB each, so 32 MiB or more in all,
  // and hundreds of GiB on glibc versions whose threshold follows the whole cache).
  const auto r = run("adam --params 1K --threads 1024 --steps 1 --json");
  if (r.exit_code == 0) GTEST_SKIP() << "this machine has room for 1024 streaming pieces";
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--threads 1024"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("half of this machine's memory"), std::string::npos) << r.output;
}

TEST(quant_command, JsonTimesQuantizeDequantizeAndReduceRequantizeEachBesideMemcpy) {
  const auto r =
      run("quant --elems 64K --threads 1 --loops 1 --bits 8 --block 2048 --dtype fp16 --inputs 3" + small_limit);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = only_json(r);
  expect_streaming_limit(j.at("memcpy"), 1);
  // int8 codes of 65,536 elements in blocks of 2048: 65,536 bytes of codes and 32 scales.
  const std::uint64_t quantized = 65536 + 32 * 4;
  const std::uint64_t input = 65536 * 2;
  for (const char* name : {"quantize", "dequantize", "reduce_requantize"}) {
    SCOPED_TRACE(name);
    expect_rates(j.at(name));
    EXPECT_EQ(j.at(name).at("working_set_bytes"), j.at(name).at("bytes"));
    if (j.at(name).at("llc_bytes") != 0) {
      EXPECT_TRUE(j.at(name).at("fits_llc").get<bool>());
    }
  }
  EXPECT_EQ(j.at("quantize").at("bytes"), input + quantized);
  EXPECT_EQ(j.at("dequantize").at("bytes"), quantized + input);
  EXPECT_EQ(j.at("reduce_requantize").at("bytes"), 4 * quantized);
  EXPECT_EQ(j.at("reduce_requantize").at("inputs"), 3);
}

}  // namespace
}  // namespace zoe::testing
