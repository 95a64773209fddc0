#include "zoe/io/file_system.hpp"

#include <sys/vfs.h>

namespace zoe::io {
namespace {
// statfs f_type values from linux/magic.h.
constexpr long tmpfs_magic = 0x01021994;
constexpr long ramfs_magic = 0x858458f6;
}  // namespace

std::optional<std::string_view> memory_file_system(const std::filesystem::path& path) noexcept {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return std::nullopt;
  if (fs.f_type == tmpfs_magic) return "tmpfs";
  if (fs.f_type == ramfs_magic) return "ramfs";
  return std::nullopt;
}

}  // namespace zoe::io
