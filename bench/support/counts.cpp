#include "counts.hpp"

#include <charconv>

#include "zoe/core/check.hpp"

namespace zoe::bench {

std::uint64_t parse_count(const std::string& text, std::string_view flag) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [rest, ec] = std::from_chars(text.data(), end, value);
  ZOE_EXPECTS(ec == std::errc() && value > 0, flag, " must be a positive number of parameters (e.g. 256M), got '", text,
              "'");
  double scale = 1;
  const std::string_view suffix(rest, static_cast<std::size_t>(end - rest));
  if (suffix == "k" || suffix == "K") {
    scale = 1e3;
  } else if (suffix == "M" || suffix == "m") {
    scale = 1e6;
  } else if (suffix == "G" || suffix == "g" || suffix == "B") {
    scale = 1e9;
  } else {
    ZOE_EXPECTS(suffix.empty(), flag, ": unknown suffix '", suffix, "' in '", text, "' (use k, M or G)");
  }
  const double n = value * scale;
  ZOE_EXPECTS(n < 1e15, flag, " '", text, "' is too large");
  ZOE_EXPECTS(n >= 1, flag, " '", text, "' is less than one");
  return static_cast<std::uint64_t>(n);
}

}  // namespace zoe::bench
