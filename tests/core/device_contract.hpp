#pragma once
// The device seam's contract as one value-parameterized suite, run on every device: the host device
// and the fake device over it (device_tests), the CUDA device (gpu_tests, skipped without a GPU).
// The cases look at device memory only through copies, so they hold for real device memory too.

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "zoe/core/device.hpp"

namespace zoe::testing {

struct device_maker {
  std::string name;
  /// The device to test, or nullptr where this machine has none (the case is skipped).
  std::function<std::unique_ptr<device>()> make;
};

class device_contract : public ::testing::TestWithParam<device_maker> {
 protected:
  void SetUp() override {
    dev_ = GetParam().make();
    if (!dev_) GTEST_SKIP() << GetParam().name << ": no such device on this machine";
  }
  std::unique_ptr<device> dev_;
};

/// Test names and messages show the device by name (not the maker's bytes).
inline void PrintTo(const device_maker& maker, std::ostream* out) { *out << maker.name; }

/// For INSTANTIATE_TEST_SUITE_P's name generator.
inline std::string device_maker_name(const ::testing::TestParamInfo<device_maker>& info) { return info.param.name; }

}  // namespace zoe::testing
