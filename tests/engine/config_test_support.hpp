#pragma once
// Helpers shared by the config tests: the message a document's parse fails with, and the
// warnings and entries of one that parses.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "zoe/core/error.hpp"
#include "zoe/engine/config/parse.hpp"

namespace zoe::engine::testing {

/// The config_error message of parsing `text`; a failure (and "") when it parses.
inline std::string config_error_of(std::string_view text) {
  try {
    (void)parse_config(text);
  } catch (const config_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a config_error for " << text;
  return {};
}

/// The warning about `key`; nullptr when there is none.
inline const config_diagnostic* warning_about(const loaded_config& c, std::string_view key) {
  const auto it = std::find_if(c.warnings.begin(), c.warnings.end(), [&](const auto& w) { return w.key == key; });
  return it == c.warnings.end() ? nullptr : &*it;
}

/// The entry of `key`; nullptr when there is none.
inline const config_entry* entry_of(const loaded_config& c, std::string_view key) {
  const auto it = std::find_if(c.entries.begin(), c.entries.end(), [&](const auto& e) { return e.key == key; });
  return it == c.entries.end() ? nullptr : &*it;
}

}  // namespace zoe::engine::testing
