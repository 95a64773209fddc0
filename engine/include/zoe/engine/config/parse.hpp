#pragma once
// Reading a configuration document: JSON text (or a file) -> engine_config, with every key zoe
// knows listed with its value and where the value came from, and every warning returned as well
// as logged. The keys, their defaults and the diagnostics are documented in engine/CONFIG.md.
//
// Errors are zoe::config_error; the message starts with the origin (file path or "<config>")
// and names the key by its full path ("zero_optimization.offload_param.device") and the allowed
// values. Warnings (deprecated names, unknown keys, ignored blocks, "auto" placeholders) are
// written to stderr through zoe::log::warn and returned in loaded_config::warnings.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "zoe/engine/config/config.hpp"

namespace zoe::engine {

/// Where a resolved value came from.
enum class config_source : std::uint8_t {
  file = 0,           ///< written in the document (under its current name or a deprecated one)
  default_value = 1,  ///< not written: DeepSpeed's (or zoe's) default
  auto_value = 2,     ///< written as "auto": resolved to the default as DeepSpeed resolves it
};
/// "file", "default" or "auto". Never throws.
[[nodiscard]] std::string_view config_source_name(config_source s) noexcept;

/// One key zoe knows, resolved: its full path under DeepSpeed's nesting (current name, never a
/// deprecated one), its value as compact JSON text ("true", "1000000000", "\"nvme\"", "null" for
/// an optional value not given), and its source.
struct config_entry {
  std::string key;
  std::string value;
  config_source source = config_source::default_value;
};

/// One warning: the key it concerns (full path) and the message (which names the key again, and
/// for an unknown key the nearest known one). The one line naming the "auto" keys resolved to
/// defaults has those keys joined by ", " as its key.
struct config_diagnostic {
  std::string key;
  std::string message;
};

/// A parsed configuration: the values, every known key (in document-independent order: DeepSpeed's
/// blocks, then zoe's), and the warnings raised while reading it.
struct loaded_config {
  engine_config config;
  std::vector<config_entry> entries;
  std::vector<config_diagnostic> warnings;
};

/// Parses and validates one JSON document. `origin` names it in messages (a file path, or
/// "<config>"). Throws config_error on a syntax error (with line and column), a duplicate key, a
/// value nested deeper than 64 levels, a non-finite or out-of-range number, a wrong type or value, two spellings of one
/// key, "auto" where only the Hugging Face integration could resolve it, or keys that contradict each other.
/// Thread-safe (no shared state besides the log).
[[nodiscard]] loaded_config parse_config(std::string_view json_text, std::string_view origin = "<config>");

/// parse_config over `json_text` with `overrides_text` merged over it first as an RFC 7386 merge
/// patch (objects merge key by key, any other value replaces, null removes). Each document is read
/// as strictly as parse_config reads one (syntax, duplicate keys, nesting, NaN), its errors naming
/// its own origin with line and column; the overrides must be an object. An error in the merged
/// values names "<origin> with <overrides_origin>". Throws config_error; thread-safe.
[[nodiscard]] loaded_config parse_config_with_overrides(std::string_view json_text, std::string_view origin,
                                                        std::string_view overrides_text,
                                                        std::string_view overrides_origin);

/// Reads `path` and parses it as parse_config does, naming the path in messages. Throws
/// config_error when the file cannot be read (with the OS error), or as parse_config does.
[[nodiscard]] loaded_config load_config_file(const std::filesystem::path& path);

/// The resolved configuration as one JSON object with DeepSpeed's nesting ("zero_optimization":
/// {"offload_param": {...}}, "aio", "fp16", "bf16", "optimizer": {"type", "params": {...}}, ...,
/// "zoe": {...}) and every key of `loaded.entries`, defaults included. `indent` < 0 gives one line.
/// Throws only std::bad_alloc.
[[nodiscard]] std::string render_config_json(const loaded_config& loaded, int indent = 2);

/// The resolved configuration as lines "key = value (source)", one per entry, in entry order.
/// Throws only std::bad_alloc.
[[nodiscard]] std::string render_config_lines(const loaded_config& loaded);

}  // namespace zoe::engine
