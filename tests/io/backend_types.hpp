#pragma once
// The backends every typed I/O test runs on. A backend the kernel or the build lacks makes its
// factory throw, and the suite skips it.

#include <gtest/gtest.h>

#include <memory>

#include "fault_injecting_backend.hpp"
#include "zoe/io/engine_factory.hpp"

namespace zoe::testing {

struct posix_backend_type {
  static std::unique_ptr<io::io_backend> make(const io::engine_options& o) { return io::make_backend("posix", o); }
};

/// The fault wrapper with no rules: must behave exactly like what it wraps.
struct fault_wrapper_type {
  static std::unique_ptr<io::io_backend> make(const io::engine_options& o) {
    return std::make_unique<fault_injecting_backend>(io::make_backend("posix", o), std::make_shared<fault_plan>());
  }
};

using backend_types = ::testing::Types<posix_backend_type, fault_wrapper_type>;

class backend_type_names {
 public:
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, posix_backend_type>) return "posix";
    if constexpr (std::is_same_v<T, fault_wrapper_type>) return "fault_wrapper";
    return "unknown";
  }
};

}  // namespace zoe::testing
