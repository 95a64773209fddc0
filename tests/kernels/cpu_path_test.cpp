// ZOE_KERNELS_CPU_PATH: read once per process, an explicit set_cpu_path() wins, a bad value is one
// clear error. The variable is read once per process, so every case runs in a fresh one: gtest's
// "threadsafe" death-test style starts this binary again for the child, with this test alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zoe/core/error.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cpu_path.hpp"

namespace zoe::kernels {
namespace {

// Any kernel call: the first one settles the path.
bool run_a_kernel() {
  const std::vector<float> x(64, 1.0f);
  return has_inf_nan(view(std::span<const float>(x)));
}

// Runs `check` in a fresh process with ZOE_KERNELS_CPU_PATH=`value`; the case passes when it
// returns true. A failing check prints why to stderr, which the parent shows.
template <class Check>
void expect_in_fresh_process(const char* value, const Check& check) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("ZOE_KERNELS_CPU_PATH", value, 1);
        std::exit(check() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(cpu_path_environment, TheVariableChoosesThePathAtTheFirstCall) {
  expect_in_fresh_process("scalar", [] {
    (void)run_a_kernel();
    return active_cpu_path() == cpu_path::scalar;
  });
}

TEST(cpu_path_environment, AnExplicitSettingBeforeTheFirstCallWins) {
  const std::vector<cpu_path> paths = available_cpu_paths();
  if (paths.size() < 2) GTEST_SKIP() << "this CPU has no SIMD path to choose over the variable's scalar";
  const cpu_path chosen = paths.back();
  expect_in_fresh_process("scalar", [chosen] {
    set_cpu_path(chosen);
    (void)run_a_kernel();
    if (active_cpu_path() == chosen) return true;
    std::fprintf(stderr, "set_cpu_path(%s) was overridden by the variable: running on %s\n",
                 std::string(cpu_path_name(chosen)).c_str(), std::string(cpu_path_name(active_cpu_path())).c_str());
    return false;
  });
}

TEST(cpu_path_environment, ABadValueIsOneConfigErrorNamingTheVariableAndTheChoices) {
  expect_in_fresh_process("avx9000", [] {
    try {
      (void)run_a_kernel();
      std::fprintf(stderr, "the first kernel call did not throw\n");
      return false;
    } catch (const config_error& e) {
      const std::string what = e.what();
      for (const char* part : {"ZOE_KERNELS_CPU_PATH", "avx9000", "auto", "scalar"}) {
        if (what.find(part) == std::string::npos) {
          std::fprintf(stderr, "the message does not name %s: %s\n", part, what.c_str());
          return false;
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "not a config_error: %s\n", e.what());
      return false;
    }
    try {
      (void)run_a_kernel();
      return active_cpu_path() != cpu_path::automatic;  // resolved to the default, best path
    } catch (const std::exception& e) {
      std::fprintf(stderr, "the error came back on the second call: %s\n", e.what());
      return false;
    }
  });
}

}  // namespace
}  // namespace zoe::kernels
