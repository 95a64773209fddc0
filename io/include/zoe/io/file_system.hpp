#pragma once
// Facts about the file system under a path that decide how zoe treats it.

#include <filesystem>
#include <optional>
#include <string_view>

namespace zoe::io {

/// "tmpfs" or "ramfs" when `path` lies on a file system kept in memory (a swap path or benchmark
/// there measures memory, not a drive); nothing otherwise, or when the path cannot be examined.
/// Never throws.
[[nodiscard]] std::optional<std::string_view> memory_file_system(const std::filesystem::path& path) noexcept;

}  // namespace zoe::io
