#pragma once
// manifest.json: what a checkpoint folder holds (format version, the model, each file's size and
// XXH3-64) and what it keeps besides the states (scaler, optimizer settings, lr). Written last, so
// a folder with a manifest is complete; read first, so nothing is loaded from a torn folder.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "zoe/engine/checkpoint/checkpoint.hpp"
#include "zoe/engine/model/layout.hpp"

namespace zoe::engine::detail {

/// One parameter of the model a checkpoint was saved from.
struct manifest_parameter {
  std::string module;
  std::string name;
  std::vector<std::uint64_t> shape;
  kernels::dtype dtype = kernels::dtype::fp16;
};

/// One state file.
struct manifest_file {
  state_kind state = state_kind::master;
  std::string name;  ///< the file's name in the folder
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};

/// client.bin (checkpoint_meta::client): listed only when the caller gave bytes.
struct manifest_client {
  std::uint64_t bytes = 0;  ///< 0: no client.bin
  std::uint64_t xxh3 = 0;
};

struct manifest {
  std::int64_t format_version = 0;
  std::string tag;
  std::vector<manifest_parameter> model;
  std::vector<manifest_file> files;
  manifest_client client;
  /// meta.client is never in the text: the save writes it to client.bin, the load reads it back.
  checkpoint_meta meta;
};

/// `layout`'s parameters as a manifest lists them.
[[nodiscard]] std::vector<manifest_parameter> describe_model(const model_layout& layout);
/// The JSON text of `m`, with its own checksum ("manifest_xxh3": XXH3-64 of the text, as written
/// with one space of indent, without that field). Doubles are written so that they read back bit
/// for bit; each must be finite (JSON has no inf or NaN).
[[nodiscard]] std::string to_json(const manifest& m);
/// Parses manifest text read from `where`. Throws checkpoint_error naming `where` and what is wrong:
/// not JSON, no checksum of its own or one that does not match (checked before any value is
/// believed, so a damaged byte is reported as damage, never as another format version or model),
/// not a zoe checkpoint manifest, another format version, a field missing or of the wrong type
/// (naming the field).
[[nodiscard]] manifest parse_manifest(std::string_view text, const std::filesystem::path& where);
/// Throws checkpoint_error naming `where` and the first parameter whose module, name, shape or
/// dtype differs from `layout`'s (or the counts, when they differ).
void check_model(const manifest& m, const model_layout& layout, const std::filesystem::path& where);

}  // namespace zoe::engine::detail
