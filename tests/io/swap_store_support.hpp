#pragma once
// What the swap store suites share: options for a small store, one-request helpers, and ways to
// reach and damage the unlinked swap files.

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "io_test_support.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/swap_channel.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::testing {

/// The chunk (block_size) of the test stores: small, so a few MiB hold many chunks.
inline constexpr std::size_t store_chunk = 64 * KiB;

/// A store over `paths` of `capacity` bytes on `engine`, chunked in store_chunk.
[[nodiscard]] io::swap_store_options store_options(std::vector<std::filesystem::path> paths, std::uint64_t capacity,
                                                   std::string engine = "posix");

/// Why `backend` cannot start here (the kernel or sandbox refuses it, or it is not in this build),
/// or nothing when it starts: the typed store suites skip with this reason.
[[nodiscard]] std::optional<std::string> backend_refusal(const std::string& backend);

/// Writes `data` at `offset` of the extent through run(); throws what run() throws.
void store_write(io::swap_channel& ch, const io::swap_extent& e, std::uint64_t offset, std::span<std::byte> data);
/// Reads through submit() and wait(); returns the one completion.
[[nodiscard]] io::io_completion store_read(io::swap_channel& ch, const io::swap_extent& e, std::uint64_t offset,
                                           std::span<std::byte> out);

/// The swap file of path `index` of the store, reached through /proc/self/fd.
[[nodiscard]] std::filesystem::path only_swap_file(const io::swap_store& store, std::size_t index = 0);

/// Damages one byte of a file (a swap file, a checkpoint's file) behind its owner's back, as a
/// failing drive would.
void flip_byte(const std::filesystem::path& file, std::uint64_t at);

}  // namespace zoe::testing
