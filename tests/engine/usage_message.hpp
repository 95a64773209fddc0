#pragma once
// The message of the usage_error a call throws, so a test can check what it names.
#include <gtest/gtest.h>

#include <string>

#include "zoe/core/error.hpp"

namespace zoe::testing {

/// Runs `f`; returns the usage_error's message, or records a failure and returns "" when it does
/// not throw one.
template <typename F>
std::string usage_message(F&& f) {
  try {
    f();
  } catch (const usage_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a usage_error";
  return {};
}

}  // namespace zoe::testing
