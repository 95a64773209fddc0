#pragma once
// The generic walk over one JSON object of the configuration: each known key is converted and
// stored through its field, deprecated spellings are read as the current key with a warning, keys
// DeepSpeed has and zoe ignores pass quietly, unknown keys are a warning naming the nearest known
// one, "auto" follows the block's policy, and every field is listed as a config_entry with its
// source. The tables of fields live in deepspeed_blocks.cpp and zoe_block.cpp.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/json_document.hpp"
#include "zoe/engine/config/parse.hpp"

namespace zoe::engine::detail {

/// What "auto" (Hugging Face's placeholder) means in a block.
enum class auto_policy : std::uint8_t {
  deepspeed_default,  ///< DeepSpeed drops it and takes its default (zero_optimization, fp16, bf16)
  hugging_face_only,  ///< only the Hugging Face integration fills it in: an error naming the key
  not_allowed,        ///< an ordinary value, checked like any other (mostly a type error)
};

/// The state of one read: where messages go and what has been found so far.
class read_context {
 public:
  explicit read_context(std::string_view origin) : origin_(origin) {}

  /// Throws config_error "<origin>: <key>: <message>".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;
  /// Logs "<origin>: <message>" through zoe::log::warn and keeps it as a diagnostic of `key`.
  void warn(std::string key, std::string_view message);

  [[nodiscard]] std::string_view origin() const noexcept { return origin_; }

  std::vector<config_entry> entries;
  std::vector<config_diagnostic> warnings;
  std::vector<std::string> auto_resolved;  ///< keys whose "auto" took DeepSpeed's default
  std::vector<std::string> auto_refused;   ///< keys whose "auto" only Hugging Face could resolve

 private:
  std::string origin_;
};

/// One known key of a block: a leaf value (apply + render) or a nested block (read).
struct field {
  std::string_view name;
  /// Leaf: converts `value` (written under `key`) into the target; throws config_error naming `key`.
  std::function<void(const json& value, const std::string& key, read_context& ctx)> apply;
  /// Leaf: the target's current value, for the entry.
  std::function<json()> render;
  /// Nested block: reads `node` (nullptr when the key is absent or null) at `key`, listing its
  /// entries (defaults when absent).
  std::function<void(read_context& ctx, const json* node, const std::string& key)> read;
};

/// A deprecated spelling of a key of the same block. `convert` turns the old value into the
/// current key's (identity when empty); when `applied` is false the value is dropped, as DeepSpeed
/// drops it, and only the warning remains.
struct deprecated_key {
  std::string_view old_name;
  std::string_view new_name;
  std::function<json(const json&)> convert;
  bool applied = true;
  std::string_view note;  ///< appended to the warning when not empty
};

/// A key DeepSpeed knows but refuses (or zoe cannot honour): an error naming it, with `message`.
struct refused_key {
  std::string_view name;
  std::string_view message;
};

/// One JSON object's keys.
struct block_spec {
  std::vector<field> fields;
  std::vector<std::string_view> ignored;  ///< DeepSpeed's keys here that zoe does not use
  std::vector<deprecated_key> deprecated;
  std::vector<refused_key> refused;
  auto_policy on_auto = auto_policy::not_allowed;
  /// Runs after the block's leaf values are applied and before they are listed (defaults that
  /// depend on other keys, checks within the block). `given` says which keys the file wrote.
  std::function<void(read_context& ctx, const std::string& path, const std::function<bool(std::string_view)>& given)>
      finish;
};

/// Reads `node` (an object; anything else is an error naming `path`) at `path` per `spec`.
void read_block(read_context& ctx, const json& node, const std::string& path, const block_spec& spec);

/// `value` as text for messages: its JSON form and, for a wrong type, what it is ("\"5\" (a string)").
[[nodiscard]] std::string describe(const json& value);

// Conversions; each throws config_error naming `key` and what is allowed.
[[nodiscard]] bool to_bool(const json& value, const std::string& key, const read_context& ctx);
/// An integer; a float counts when it is integral (1e9). In [min, max].
[[nodiscard]] std::int64_t to_int(const json& value, const std::string& key, const read_context& ctx, std::int64_t min,
                                  std::int64_t max);
[[nodiscard]] std::uint64_t to_uint(const json& value, const std::string& key, const read_context& ctx,
                                    std::uint64_t min, std::uint64_t max);
/// A finite number in [min, max].
[[nodiscard]] double to_number(const json& value, const std::string& key, const read_context& ctx, double min,
                               double max);
[[nodiscard]] std::string to_string(const json& value, const std::string& key, const read_context& ctx);
/// One of `allowed` (exactly as written there).
[[nodiscard]] std::string to_choice(const json& value, const std::string& key, const read_context& ctx,
                                    const std::vector<std::string_view>& allowed);

// Leaf fields over a target the caller keeps alive while the block is read.
[[nodiscard]] field bool_field(std::string_view name, bool& target);
[[nodiscard]] field int_field(std::string_view name, std::int64_t& target, std::int64_t min,
                              std::int64_t max = std::numeric_limits<std::int64_t>::max());
[[nodiscard]] field uint_field(std::string_view name, std::uint64_t& target, std::uint64_t min = 0,
                               std::uint64_t max = std::numeric_limits<std::uint64_t>::max());
[[nodiscard]] field optional_uint_field(std::string_view name, std::optional<std::uint64_t>& target, std::uint64_t min);
[[nodiscard]] field number_field(std::string_view name, double& target, double min, double max);
[[nodiscard]] field choice_field(std::string_view name, std::string& target, std::vector<std::string_view> allowed);
[[nodiscard]] field path_field(std::string_view name, std::optional<std::filesystem::path>& target);

}  // namespace zoe::engine::detail
