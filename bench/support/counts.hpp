#pragma once
// Counts of model elements as the bench flags spell them: "256M", "1.5G", "1000000", "1e9"
// (decimal suffixes, as model sizes go; byte sizes use zoe's parse_bytes with binary suffixes).

#include <cstdint>
#include <string>
#include <string_view>

namespace zoe::bench {

/// Parses a positive count with an optional decimal suffix k, M or G (B for billions). Throws
/// usage_error starting with `flag` for anything else, zero, or 1e15 and more.
[[nodiscard]] std::uint64_t parse_count(const std::string& text, std::string_view flag);

}  // namespace zoe::bench
