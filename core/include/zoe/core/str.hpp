#pragma once
// Building messages from mixed values without a formatting library (GCC 12 has no <format>).

#include <sstream>
#include <string>
#include <utility>

namespace zoe {

/// Concatenates the stream representations of all arguments. Throws only std::bad_alloc.
template <typename... Args>
[[nodiscard]] std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return std::move(out).str();
}

}  // namespace zoe
