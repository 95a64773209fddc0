#include "zoe/core/units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <limits>

#include "zoe/core/check.hpp"

namespace zoe {
namespace {

struct suffix {
  std::string_view text;
  std::uint64_t factor;
};

constexpr std::array<suffix, 14> suffixes{{
    {"", 1},
    {"b", 1},
    {"k", KiB},
    {"kib", KiB},
    {"kb", 1000ULL},
    {"m", MiB},
    {"mib", MiB},
    {"mb", 1000ULL * 1000},
    {"g", GiB},
    {"gib", GiB},
    {"gb", 1000ULL * 1000 * 1000},
    {"t", TiB},
    {"tib", TiB},
    {"tb", 1000ULL * 1000 * 1000 * 1000},
}};

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
  }
  return true;
}

}  // namespace

std::uint64_t parse_bytes(std::string_view text, std::string_view what) {
  std::uint64_t number = 0;
  const auto* begin = text.data();
  const auto* end = text.data() + text.size();
  const auto [rest, ec] = std::from_chars(begin, end, number);
  ZOE_EXPECTS(ec == std::errc() && rest != begin, what, ": '", text,
              "' is not a byte size (expected a whole number with an optional suffix such as 4096, 1MiB, 2G)");
  std::string_view unit(rest, static_cast<std::size_t>(end - rest));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  for (const auto& s : suffixes) {
    if (iequals(unit, s.text)) {
      ZOE_EXPECTS(number <= std::numeric_limits<std::uint64_t>::max() / s.factor, what, ": '", text, "' is too large");
      return number * s.factor;
    }
  }
  throw usage_error(
      str(what, ": '", text, "' has an unknown unit '", unit, "' (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)"));
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::array<std::string_view, 5> names{"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  std::uint64_t scale = 1;
  while (unit + 1 < names.size() && bytes >= scale * 1024) {
    scale *= 1024;
    ++unit;
  }
  if (bytes % scale == 0) return str(bytes / scale, " ", names[unit]);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / static_cast<double>(scale));
  return str(buf, " ", names[unit]);
}

}  // namespace zoe
