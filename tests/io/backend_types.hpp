#pragma once
// The backends every typed I/O test runs on. A backend the kernel or the build lacks makes its
// factory throw, and the suite skips it.

#include <gtest/gtest.h>

#include <memory>

#include "fault_injecting_backend.hpp"
#include "zoe/io/engine_factory.hpp"

namespace zoe::testing {

/// A backend by the name the factory knows it by. Not in this build: make() throws usage_error,
/// and the suite skips.
template <const char* Name>
struct named_backend_type {
  static constexpr const char* name = Name;
  static std::unique_ptr<io::io_backend> make(const io::engine_options& o) { return io::make_backend(Name, o); }
};

inline constexpr char posix_name[] = "posix";
inline constexpr char uring_name[] = "uring";
inline constexpr char aio_name[] = "aio";

using posix_backend_type = named_backend_type<posix_name>;
using uring_backend_type = named_backend_type<uring_name>;
using aio_backend_type = named_backend_type<aio_name>;

/// The fault wrapper with no rules around a backend: must behave exactly like what it wraps.
template <typename Inner>
struct fault_wrapper_type {
  static constexpr const char* wrapped = Inner::name;
  static std::unique_ptr<io::io_backend> make(const io::engine_options& o) {
    return std::make_unique<fault_injecting_backend>(Inner::make(o), std::make_shared<fault_plan>());
  }
};

using backend_types =
    ::testing::Types<posix_backend_type, uring_backend_type, aio_backend_type, fault_wrapper_type<posix_backend_type>,
                     fault_wrapper_type<uring_backend_type>, fault_wrapper_type<aio_backend_type>>;

/// The raw backends alone, for suites that wrap them themselves.
using raw_backend_types = ::testing::Types<posix_backend_type, uring_backend_type, aio_backend_type>;

class backend_type_names {
 public:
  template <typename T>
  static std::string GetName(int) {
    if constexpr (requires { T::wrapped; }) {
      return std::string("fault_wrapper_") + T::wrapped;
    } else {
      return T::name;
    }
  }
};

}  // namespace zoe::testing
