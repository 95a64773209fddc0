#pragma once
// The known key a misspelled one most likely meant, for the unknown-key warning.

#include <cstddef>
#include <span>
#include <string_view>

namespace zoe::engine::detail {

/// Levenshtein distance (insertions, deletions, substitutions; each costs 1). Throws only
/// std::bad_alloc.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate nearest to `key` by edit_distance (the first of equals); empty when there are
/// no candidates. Throws only std::bad_alloc.
[[nodiscard]] std::string_view nearest_key(std::string_view key, std::span<const std::string_view> candidates);

}  // namespace zoe::engine::detail
