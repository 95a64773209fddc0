#include "config/block_reader.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "config/nearest_key.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {

void read_context::fail(std::string_view key, std::string_view message) const {
  throw config_error(str(origin_, ": ", key, ": ", message));
}

void read_context::warn(std::string key, std::string_view message) {
  log::warn(origin_, ": ", message);
  warnings.push_back(config_diagnostic{std::move(key), std::string(message)});
}

std::string describe(const json& value) {
  const char* kind = "";
  switch (value.type()) {
    case json::value_t::string: kind = " (a string)"; break;
    case json::value_t::boolean: kind = " (a boolean)"; break;
    case json::value_t::array: kind = " (an array)"; break;
    case json::value_t::object: kind = " (an object)"; break;
    case json::value_t::null: kind = " (null)"; break;
    default: break;
  }
  std::string text = value.dump();
  constexpr std::size_t longest = 60;
  if (text.size() > longest) text = text.substr(0, longest) + "...";
  return text + kind;
}

bool to_bool(const json& value, const std::string& key, const read_context& ctx) {
  if (!value.is_boolean()) ctx.fail(key, str("expected true or false, got ", describe(value)));
  return value.get<bool>();
}

namespace {

// An integral value of any JSON number type, or a message saying why it is not one. Doubles
// beyond 2^63 are compared as doubles so that the range message names the real bound.
struct integral {
  bool negative = false;
  std::uint64_t magnitude = 0;
};

integral to_integral(const json& value, const std::string& key, const read_context& ctx, std::string_view range) {
  if (value.is_number_unsigned()) return integral{false, value.get<std::uint64_t>()};
  if (value.is_number_integer()) {
    const auto v = value.get<std::int64_t>();
    return v < 0 ? integral{true, std::uint64_t{0} - static_cast<std::uint64_t>(v)}
                 : integral{false, static_cast<std::uint64_t>(v)};
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d)) ctx.fail(key, str("expected an integer in ", range, ", got a non-finite number"));
    if (std::trunc(d) != d)
      ctx.fail(key, str("expected an integer in ", range, ", got ", describe(value), " (not integral)"));
    constexpr double two_to_64 = 18446744073709551616.0;
    if (std::fabs(d) >= two_to_64)
      ctx.fail(key, str("expected an integer in ", range, ", got ", describe(value), " (out of range)"));
    return d < 0 ? integral{true, static_cast<std::uint64_t>(-d)} : integral{false, static_cast<std::uint64_t>(d)};
  }
  ctx.fail(key, str("expected an integer in ", range, ", got ", describe(value)));
}

}  // namespace

std::int64_t to_int(const json& value, const std::string& key, const read_context& ctx, std::int64_t min,
                    std::int64_t max) {
  const std::string range = str('[', min, ", ", max, ']');
  const integral v = to_integral(value, key, ctx, range);
  constexpr std::uint64_t int64_limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  bool in_range = false;
  std::int64_t result = 0;
  if (!v.negative && v.magnitude <= int64_limit) {
    result = static_cast<std::int64_t>(v.magnitude);
    in_range = true;
  } else if (v.negative && v.magnitude <= int64_limit + 1) {
    result = v.magnitude == int64_limit + 1 ? std::numeric_limits<std::int64_t>::min()
                                            : -static_cast<std::int64_t>(v.magnitude);
    in_range = true;
  }
  if (!in_range || result < min || result > max)
    ctx.fail(key, str("expected an integer in ", range, ", got ", describe(value)));
  return result;
}

std::uint64_t to_uint(const json& value, const std::string& key, const read_context& ctx, std::uint64_t min,
                      std::uint64_t max) {
  const std::string range = str('[', min, ", ", max, ']');
  const integral v = to_integral(value, key, ctx, range);
  if ((v.negative && v.magnitude != 0) || v.magnitude < min || v.magnitude > max) {
    ctx.fail(key, str("expected an integer in ", range, ", got ", describe(value)));
  }
  return v.magnitude;
}

double to_number(const json& value, const std::string& key, const read_context& ctx, double min, double max) {
  if (!value.is_number()) ctx.fail(key, str("expected a number in [", min, ", ", max, "], got ", describe(value)));
  const double d = value.get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    ctx.fail(key, str("expected a number in [", min, ", ", max, "], got ", describe(value)));
  }
  return d;
}

std::string to_string(const json& value, const std::string& key, const read_context& ctx) {
  if (!value.is_string()) ctx.fail(key, str("expected a string, got ", describe(value)));
  return value.get<std::string>();
}

std::string to_choice(const json& value, const std::string& key, const read_context& ctx,
                      const std::vector<std::string_view>& allowed) {
  std::string list;
  for (const std::string_view a : allowed) list += str(list.empty() ? "" : ", ", a);
  if (!value.is_string()) ctx.fail(key, str("expected one of ", list, ", got ", describe(value)));
  std::string s = value.get<std::string>();
  if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
    ctx.fail(key, str("expected one of ", list, ", got ", describe(value)));
  }
  return s;
}

field bool_field(std::string_view name, bool& target) {
  return field{name,
               [&target](const json& v, const std::string& key, read_context& ctx) { target = to_bool(v, key, ctx); },
               [&target] { return json(target); },
               {}};
}

field int_field(std::string_view name, std::int64_t& target, std::int64_t min, std::int64_t max) {
  return field{name,
               [&target, min, max](const json& v, const std::string& key, read_context& ctx) {
                 target = to_int(v, key, ctx, min, max);
               },
               [&target] { return json(target); },
               {}};
}

field uint_field(std::string_view name, std::uint64_t& target, std::uint64_t min, std::uint64_t max) {
  return field{name,
               [&target, min, max](const json& v, const std::string& key, read_context& ctx) {
                 target = to_uint(v, key, ctx, min, max);
               },
               [&target] { return json(target); },
               {}};
}

field optional_uint_field(std::string_view name, std::optional<std::uint64_t>& target, std::uint64_t min) {
  return field{name,
               [&target, min](const json& v, const std::string& key, read_context& ctx) {
                 if (v.is_null()) {
                   target.reset();
                 } else {
                   target = to_uint(v, key, ctx, min, std::numeric_limits<std::uint64_t>::max());
                 }
               },
               [&target] { return target ? json(*target) : json(nullptr); },
               {}};
}

field number_field(std::string_view name, double& target, double min, double max) {
  return field{name,
               [&target, min, max](const json& v, const std::string& key, read_context& ctx) {
                 target = to_number(v, key, ctx, min, max);
               },
               [&target] { return json(target); },
               {}};
}

field choice_field(std::string_view name, std::string& target, std::vector<std::string_view> allowed) {
  return field{name,
               [&target, allowed = std::move(allowed)](const json& v, const std::string& key, read_context& ctx) {
                 target = to_choice(v, key, ctx, allowed);
               },
               [&target] { return json(target); },
               {}};
}

field path_field(std::string_view name, std::optional<std::filesystem::path>& target) {
  return field{name,
               [&target](const json& v, const std::string& key, read_context& ctx) {
                 if (v.is_null()) {
                   target.reset();
                   return;
                 }
                 std::string s = to_string(v, key, ctx);
                 if (s.empty()) ctx.fail(key, "expected a path, got an empty string");
                 target = std::filesystem::path(std::move(s));
               },
               [&target] { return target ? json(target->string()) : json(nullptr); },
               {}};
}

namespace {

const field* find_field(const block_spec& spec, std::string_view name) {
  const auto it = std::find_if(spec.fields.begin(), spec.fields.end(), [&](const field& f) { return f.name == name; });
  return it == spec.fields.end() ? nullptr : &*it;
}

const deprecated_key* find_deprecated(const block_spec& spec, std::string_view name) {
  const auto it = std::find_if(spec.deprecated.begin(), spec.deprecated.end(),
                               [&](const deprecated_key& d) { return d.old_name == name; });
  return it == spec.deprecated.end() ? nullptr : &*it;
}

bool is_auto(const json& v) { return v.is_string() && v.get_ref<const std::string&>() == "auto"; }

// The block's keys under their current names, with the spelling each was written as; deprecated
// spellings warn here, and two spellings of one key are an error.
struct current_keys {
  json values = json::object();
  std::vector<std::pair<std::string, std::string>> written_as;  // current name -> as written

  [[nodiscard]] const std::string& spelling(const std::string& name) const {
    return std::find_if(written_as.begin(), written_as.end(), [&](const auto& p) { return p.first == name; })->second;
  }
};

current_keys resolve_spellings(read_context& ctx, const json& node, const std::string& path, const block_spec& spec) {
  current_keys out;
  for (const auto& [key, value] : node.items()) {
    const auto refused = std::find_if(spec.refused.begin(), spec.refused.end(),
                                      [&key = key](const refused_key& r) { return r.name == key; });
    if (refused != spec.refused.end()) ctx.fail(join_key(path, key), refused->message);
    std::string name = key;
    json converted = value;
    if (const deprecated_key* d = find_deprecated(spec, key)) {
      ctx.warn(join_key(path, key), str(join_key(path, key), " is deprecated; use ", join_key(path, d->new_name),
                                        d->applied ? "" : " (its value is not applied, as DeepSpeed does not apply it)",
                                        d->note.empty() ? "" : "; ", d->note));
      if (!d->applied) continue;
      name = std::string(d->new_name);
      if (d->convert) converted = d->convert(value);
    }
    if (out.values.contains(name)) {
      ctx.fail(join_key(path, name), str(join_key(path, out.spelling(name)), " and ", join_key(path, key),
                                         " are two spellings of one key; give only ", join_key(path, name)));
    }
    out.values[name] = std::move(converted);
    out.written_as.emplace_back(name, key);
  }
  return out;
}

void warn_unknown(read_context& ctx, const std::string& path, const std::string& key, const block_spec& spec) {
  std::vector<std::string_view> known;
  for (const field& f : spec.fields) known.push_back(f.name);
  for (const std::string_view i : spec.ignored) known.push_back(i);
  for (const deprecated_key& d : spec.deprecated) known.push_back(d.old_name);
  const std::string_view nearest = nearest_key(key, known);
  const std::string full = join_key(path, key);
  ctx.warn(full, nearest.empty()
                     ? str(full, ": unknown key, not applied (this block has no keys)")
                     : str(full, ": unknown key, not applied; the nearest known key is ", join_key(path, nearest)));
}

}  // namespace

void read_block(read_context& ctx, const json& node, const std::string& path, const block_spec& spec) {
  if (!node.is_object()) ctx.fail(path, str("expected an object, got ", describe(node)));
  const current_keys keys = resolve_spellings(ctx, node, path, spec);

  std::vector<std::pair<std::string_view, config_source>> sources;
  for (const auto& [name, value] : keys.values.items()) {
    const field* f = find_field(spec, name);
    if (f == nullptr) {
      if (std::find(spec.ignored.begin(), spec.ignored.end(), name) == spec.ignored.end()) {
        warn_unknown(ctx, path, keys.spelling(name), spec);
      }
      continue;
    }
    const std::string key = join_key(path, name);
    if (is_auto(value) && spec.on_auto != auto_policy::not_allowed) {
      (spec.on_auto == auto_policy::deepspeed_default ? ctx.auto_resolved : ctx.auto_refused).push_back(key);
      sources.emplace_back(f->name, config_source::auto_value);
      continue;
    }
    sources.emplace_back(f->name, config_source::file);
    if (f->apply) f->apply(value, join_key(path, keys.spelling(name)), ctx);
  }

  const auto source_of = [&](std::string_view name) {
    const auto it = std::find_if(sources.begin(), sources.end(), [&](const auto& s) { return s.first == name; });
    return it == sources.end() ? config_source::default_value : it->second;
  };
  if (spec.finish) {
    spec.finish(ctx, path, [&](std::string_view name) { return source_of(name) == config_source::file; });
  }

  for (const field& f : spec.fields) {
    const std::string key = join_key(path, f.name);
    if (f.read) {
      const bool present = source_of(f.name) == config_source::file && !keys.values.at(std::string(f.name)).is_null();
      f.read(ctx, present ? &keys.values.at(std::string(f.name)) : nullptr, key);
    } else {
      ctx.entries.push_back(config_entry{key, f.render().dump(), source_of(f.name)});
    }
  }
}

}  // namespace zoe::engine::detail
