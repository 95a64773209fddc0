#pragma once
// What a checkpoint folder holds and how its names are made: shared by the save, the load and the
// manifest.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "zoe/engine/checkpoint/checkpoint_fs.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/tiers/placement.hpp"

namespace zoe::engine::detail {

/// Raised when the manifest's layout changes in a way an older reader cannot read.
inline constexpr std::int64_t checkpoint_format_version = 1;
inline constexpr std::string_view manifest_name = "manifest.json";
inline constexpr std::string_view latest_name = "latest";
/// The file holding checkpoint_meta::client (only when it is not empty).
inline constexpr std::string_view client_name = "client.bin";
/// Appended to a file's name while it is written; it is renamed once durable.
inline constexpr std::string_view temp_suffix = ".tmp";
/// The most of a state a save or load holds in staging memory at once (a save holds two such
/// pieces, a load one): states not in host memory move through state_io in pieces of this size.
inline constexpr std::size_t piece_bytes = std::size_t{4} << 20;

/// "<state>.bin".
[[nodiscard]] std::string state_file(state_kind s);
/// The states a checkpoint of `layout` keeps, in file order: working (only when some parameter
/// has a working copy apart from its master), master, exp_avg, exp_avg_sq; never the gradient.
[[nodiscard]] std::vector<state_kind> saved_states(const model_layout& layout);
/// Bytes of `p`'s real (unpadded) elements of state `s`; 0 for a state with no bytes (the working
/// copy of an fp32 parameter). Never throws.
[[nodiscard]] std::uint64_t real_bytes(const parameter_layout& p, state_kind s) noexcept;
/// Bytes of the real elements of state `s` in rank `rank`'s shard of `p` (elements
/// [rank * shard_numel, rank * shard_numel + real_numel(rank)) of the parameter, the rank's slice
/// of the file's part for `p`); 0 for a state with no bytes. Never throws.
[[nodiscard]] std::uint64_t shard_real_bytes(const parameter_layout& p, state_kind s, std::size_t rank) noexcept;
/// Bytes of the file of state `s`: the sum of real_bytes over the parameters.
[[nodiscard]] std::uint64_t file_bytes(const model_layout& layout, state_kind s) noexcept;

/// Why `tag` cannot name a checkpoint folder ("is empty", "holds a '/'", ...), or empty when it
/// can: a plain folder name of at most 200 characters that is none of the names a save writes in
/// the root (not starting with '.', as the staging folders do; not "latest" or "latest.tmp").
[[nodiscard]] std::string tag_problem(std::string_view tag);
/// The folder a save of `tag` is built in before it is moved to root/tag.
[[nodiscard]] std::filesystem::path staging_folder(const std::filesystem::path& root, std::string_view tag);

/// The whole file at `path`, read through `fs`. Throws what fs throws.
[[nodiscard]] std::string read_whole(checkpoint_fs& fs, const std::filesystem::path& path);
/// Writes `text` to path + temp_suffix, syncs it and renames it to `path` (replacing what is
/// there, a link itself, not what it names); the caller syncs the folder. Whatever is at the
/// temporary name is removed first, never written through. Throws what fs throws.
void write_durably(checkpoint_fs& fs, const std::filesystem::path& path, std::string_view text);
/// Removes the folder `path` and the files in it (a checkpoint folder holds no folders); nothing
/// when it is missing; a symbolic link at `path` is removed itself, never followed. Throws what fs
/// throws.
void remove_flat_folder(checkpoint_fs& fs, const std::filesystem::path& path);

}  // namespace zoe::engine::detail
