#pragma once
// Reading JSON text into a tree without losing what the default parser loses: a duplicate key is
// an error (nlohmann keeps the last one silently), and a syntax error, a NaN or Infinity, or a
// number out of range names the line, the column and the key it was read under.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace zoe::engine::detail {

/// The tree the config reader walks: objects keep the document's key order for messages.
using json = nlohmann::ordered_json;

/// Parses one JSON document. Throws config_error "<origin>:<line>:<column>: ..." naming the key
/// path for a syntax error, NaN/Infinity or an out-of-range number, and "<origin>: <key>:
/// duplicate key" for a key given twice in one object.
[[nodiscard]] json read_json_document(std::string_view text, std::string_view origin);

/// "a.b.c" for a child key of `parent` ("" at the top level).
[[nodiscard]] std::string join_key(std::string_view parent, std::string_view key);

}  // namespace zoe::engine::detail
