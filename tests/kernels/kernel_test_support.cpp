#include "kernel_test_support.hpp"

#include <gtest/gtest.h>

#include <functional>

#include "zoe/kernels/cast.hpp"

namespace zoe::kernels::test {

std::vector<cpu_path> simd_paths() {
  // Automatic dispatch too: it picks the best target Highway compiled, which may be newer than
  // any named path (AVX3_ZEN4, AVX3_SPR, ...) and must match the scalar path as they do.
  std::vector<cpu_path> v;
  for (const cpu_path p : available_cpu_paths()) {
    if (p != cpu_path::scalar) v.push_back(p);
  }
  if (!v.empty()) v.push_back(cpu_path::automatic);
  return v;
}

std::mt19937_64 rng_for_test() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();
  std::random_device entropy;
  const std::uint64_t seed = std::hash<std::string>{}(name) ^ (static_cast<std::uint64_t>(entropy()) << 20);
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return std::mt19937_64(seed);
}

std::vector<float> normal_values(std::mt19937_64& rng, std::size_t n, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) {
    do {
      x = dist(rng);
    } while (x == 0.0f);
  }
  return v;
}

std::vector<std::byte> encode(const std::vector<float>& values, dtype t) {
  std::vector<std::byte> out(values.size() * dtype_size(t));
  cast(view(std::span<const float>(values)), tensor_view{t, out.data(), values.size()});
  return out;
}

std::vector<float> decode(const std::vector<std::byte>& bytes, dtype t) {
  std::vector<float> out(bytes.size() / dtype_size(t));
  cast(const_tensor_view{t, bytes.data(), out.size()}, view(std::span<float>(out)));
  return out;
}

long first_difference(const void* a, const void* b, std::size_t bytes) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (x[i] != y[i]) return static_cast<long>(i);
  }
  return -1;
}

}  // namespace zoe::kernels::test
