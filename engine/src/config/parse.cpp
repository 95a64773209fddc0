// parse_config: the JSON tree, the tables of blocks, the checks across them; and the renderings.
#include "zoe/engine/config/parse.hpp"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "config/blocks.hpp"
#include "config/checks.hpp"
#include "config/json_document.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {

std::string_view config_source_name(config_source s) noexcept {
  switch (s) {
    case config_source::file: return "file";
    case config_source::default_value: return "default";
    case config_source::auto_value: return "auto";
  }
  return "unknown";
}

namespace {

void expect_object(const detail::json& root, std::string_view origin) {
  if (!root.is_object()) {
    detail::read_context(origin).fail("the top level", str("expected an object, got ", detail::describe(root)));
  }
}

loaded_config read_config(const detail::json& root, std::string_view origin) {
  expect_object(root, origin);
  detail::read_context ctx(origin);
  loaded_config out;
  detail::read_block(ctx, root, "", detail::top_level_block(out.config));
  detail::check_config(ctx, out.config);
  out.entries = std::move(ctx.entries);
  out.warnings = std::move(ctx.warnings);
  return out;
}

}  // namespace

loaded_config parse_config(std::string_view json_text, std::string_view origin) {
  return read_config(detail::read_json_document(json_text, origin), origin);
}

loaded_config parse_config_with_overrides(std::string_view json_text, std::string_view origin,
                                          std::string_view overrides_text, std::string_view overrides_origin) {
  // Both trees come from the strict reader, so merging (which recurses) meets at most 64 levels.
  detail::json root = detail::read_json_document(json_text, origin);
  expect_object(root, origin);
  const detail::json patch = detail::read_json_document(overrides_text, overrides_origin);
  expect_object(patch, overrides_origin);
  root.merge_patch(patch);
  return read_config(root, str(origin, " with ", overrides_origin));
}

loaded_config load_config_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw config_error(str(path.string(), ": cannot read the configuration file: ", errno_text(err)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw config_error(str(path.string(), ": cannot read the configuration file"));
  return parse_config(text.str(), path.string());
}

std::string render_config_json(const loaded_config& loaded, int indent) {
  detail::json root = detail::json::object();
  for (const config_entry& e : loaded.entries) {
    detail::json* node = &root;
    std::string_view rest = e.key;
    for (std::size_t dot = rest.find('.'); dot != std::string_view::npos; dot = rest.find('.')) {
      node = &(*node)[std::string(rest.substr(0, dot))];
      rest.remove_prefix(dot + 1);
    }
    (*node)[std::string(rest)] = detail::json::parse(e.value);
  }
  return root.dump(indent);
}

std::string render_config_lines(const loaded_config& loaded) {
  std::string out;
  for (const config_entry& e : loaded.entries)
    out += str(e.key, " = ", e.value, " (", config_source_name(e.source), ")\n");
  return out;
}

}  // namespace zoe::engine
