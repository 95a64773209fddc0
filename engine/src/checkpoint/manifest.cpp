#include "manifest.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <sstream>

#include "checkpoint_format.hpp"
#include "xxh3_stream.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/tiers/placement.hpp"

namespace zoe::engine::detail {

namespace {

using json = nlohmann::ordered_json;
constexpr std::string_view format_name = "zoe checkpoint";

/// Throws checkpoint_error naming the manifest and the field.
[[noreturn]] void refuse(const std::filesystem::path& where, std::string_view field, std::string_view what) {
  throw checkpoint_error(str("checkpoint manifest '", where.string(), "': ", field, " ", what));
}

const json& member(const json& object, std::string_view key, std::string_view field,
                   const std::filesystem::path& where) {
  if (!object.is_object()) refuse(where, field, "is not an object");
  const auto it = object.find(key);
  if (it == object.end()) refuse(where, str(field, ".", key), "is missing");
  return *it;
}

template <typename T>
T value(const json& object, std::string_view key, std::string_view field, const std::filesystem::path& where) {
  const json& v = member(object, key, field, where);
  const std::string name = str(field, ".", key);
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) refuse(where, name, "is not true or false");
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) refuse(where, name, "is not a string");
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number()) refuse(where, name, "is not a number");
  } else if constexpr (std::is_unsigned_v<T>) {
    if (!v.is_number_unsigned()) refuse(where, name, "is not a non-negative integer");
  } else {
    if (!v.is_number_integer()) refuse(where, name, "is not an integer");
  }
  return v.get<T>();
}

const json& array_member(const json& object, std::string_view key, std::string_view field,
                         const std::filesystem::path& where) {
  const json& v = member(object, key, field, where);
  if (!v.is_array()) refuse(where, str(field, ".", key), "is not an array");
  return v;
}

/// A member of two numbers (betas).
std::array<double, 2> two_numbers(const json& object, std::string_view key, std::string_view field,
                                  const std::filesystem::path& where) {
  const json& v = array_member(object, key, field, where);
  if (v.size() != 2 || !v[0].is_number() || !v[1].is_number())
    refuse(where, str(field, ".", key), "is not two numbers");
  return {v[0].get<double>(), v[1].get<double>()};
}

/// The "xxh3" member of `object` (16 hex digits).
std::uint64_t hash_value(const json& object, std::string_view field, const std::filesystem::path& where) {
  const std::string hash = value<std::string>(object, "xxh3", field, where);
  std::uint64_t out = 0;
  const auto [end, ec] = std::from_chars(hash.data(), hash.data() + hash.size(), out, 16);
  if (hash.size() != 16 || ec != std::errc{} || end != hash.data() + hash.size()) {
    refuse(where, str(field, ".xxh3"), str("'", hash, "' is not 16 hex digits"));
  }
  return out;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i > 0 ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

// The field holding the manifest's own checksum, and the hash it holds.
constexpr const char* self_checksum_key = "manifest_xxh3";

/// Refuses a manifest whose own checksum is missing or does not match. It comes before anything
/// the manifest says is believed: a flipped byte can make it read as another format version, or
/// as the manifest of another model.
void check_own_checksum(const json& j, const std::filesystem::path& where) {
  const auto recorded = j.find(self_checksum_key);
  if (recorded == j.end() || !recorded->is_string()) {
    throw checkpoint_error(str("checkpoint manifest '", where.string(), "' has no checksum of its own (",
                               self_checksum_key, "): it is damaged, or was not written by zoe"));
  }
  json content = j;
  content.erase(self_checksum_key);
  const std::string actual = hash_hex(hash_of(content.dump(1)));
  if (recorded->get<std::string>() != actual) {
    throw checkpoint_error(str("checkpoint manifest '", where.string(), "' does not match its own checksum (",
                               self_checksum_key, " ", recorded->get<std::string>(), ", its content hashes to ", actual,
                               "): a byte of it changed (corrupt)"));
  }
}

}  // namespace

std::vector<manifest_parameter> describe_model(const model_layout& layout) {
  std::vector<manifest_parameter> out;
  out.reserve(layout.parameters().size());
  for (const parameter_layout& p : layout.parameters()) {
    out.push_back({layout.module(p.module).name, p.name, p.shape, p.dtype});
  }
  return out;
}

std::string to_json(const manifest& m) {
  json j;
  j["format"] = format_name;
  j["format_version"] = m.format_version;
  j["tag"] = m.tag;
  json model = json::array();
  for (const manifest_parameter& p : m.model) {
    model.push_back(
        {{"module", p.module}, {"name", p.name}, {"shape", p.shape}, {"dtype", kernels::dtype_name(p.dtype)}});
  }
  j["model"] = std::move(model);
  json files = json::array();
  for (const manifest_file& f : m.files) {
    files.push_back(
        {{"state", state_kind_name(f.state)}, {"file", f.name}, {"bytes", f.bytes}, {"xxh3", hash_hex(f.xxh3)}});
  }
  j["files"] = std::move(files);
  if (m.client.bytes > 0) {
    j["client"] = {{"file", client_name}, {"bytes", m.client.bytes}, {"xxh3", hash_hex(m.client.xxh3)}};
  }
  const loss_scaler_state& s = m.meta.scaler;
  j["loss_scaler"] = {{"scale", s.scale},
                      {"cur_iter", s.cur_iter},
                      {"last_overflow_iter", s.last_overflow_iter},
                      {"cur_hysteresis", s.cur_hysteresis},
                      {"optimizer_steps", s.optimizer_steps}};
  const optimizer_config& o = m.meta.optimizer;
  j["optimizer"] = {{"type", o.type},
                    {"lr", o.lr},
                    {"betas", o.betas},
                    {"eps", o.eps},
                    {"weight_decay", o.weight_decay},
                    {"adam_w_mode", o.adam_w_mode},
                    {"bias_correction", o.bias_correction}};
  j["lr"] = m.meta.lr;
  if (!m.meta.groups.empty()) {
    json groups = json::array();
    for (const group_hyper& g : m.meta.groups) {
      groups.push_back({{"lr", g.lr}, {"weight_decay", g.weight_decay}, {"betas", g.betas}, {"eps", g.eps}});
    }
    j["groups"] = std::move(groups);
  }
  // nlohmann writes doubles in the shortest form that reads back to the same bits, and keys in
  // order, so the text parsed back and written again is this text: the checksum covers it.
  j[self_checksum_key] = hash_hex(hash_of(j.dump(1)));
  return j.dump(1) + "\n";
}

manifest parse_manifest(std::string_view text, const std::filesystem::path& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw checkpoint_error(str("checkpoint manifest '", where.string(), "' is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) {
    throw checkpoint_error(str("'", where.string(), "' is not a zoe checkpoint manifest (not a JSON object)"));
  }
  check_own_checksum(j, where);
  if (!j.contains("format") || j["format"] != format_name) {
    throw checkpoint_error(
        str("'", where.string(), "' is not a zoe checkpoint manifest (no \"format\": \"", format_name, "\")"));
  }
  manifest m;
  m.format_version = value<std::int64_t>(j, "format_version", "manifest", where);
  if (m.format_version != checkpoint_format_version) {
    throw checkpoint_error(str("checkpoint manifest '", where.string(), "' has format version ", m.format_version,
                               "; this build reads version ", checkpoint_format_version));
  }
  m.tag = value<std::string>(j, "tag", "manifest", where);
  const json& model = array_member(j, "model", "manifest", where);
  for (std::size_t i = 0; i < model.size(); ++i) {
    const std::string field = str("model[", i, "]");
    manifest_parameter p;
    p.module = value<std::string>(model[i], "module", field, where);
    p.name = value<std::string>(model[i], "name", field, where);
    const json& shape = array_member(model[i], "shape", field, where);
    for (const json& d : shape) {
      if (!d.is_number_unsigned()) refuse(where, str(field, ".shape"), "holds something not a non-negative integer");
      p.shape.push_back(d.get<std::uint64_t>());
    }
    const std::string dtype = value<std::string>(model[i], "dtype", field, where);
    try {
      p.dtype = kernels::parse_dtype(dtype, str(field, ".dtype"));
    } catch (const error& e) {
      refuse(where, str(field, ".dtype"), str("'", dtype, "' is not a dtype (", e.what(), ")"));
    }
    m.model.push_back(std::move(p));
  }
  const json& files = array_member(j, "files", "manifest", where);
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string field = str("files[", i, "]");
    manifest_file f;
    const std::string state = value<std::string>(files[i], "state", field, where);
    const auto* kind =
        std::find_if(all_states.begin(), all_states.end(), [&](state_kind s) { return state_kind_name(s) == state; });
    if (kind == all_states.end()) refuse(where, str(field, ".state"), str("'", state, "' is not a state"));
    f.state = *kind;
    f.name = value<std::string>(files[i], "file", field, where);
    f.bytes = value<std::uint64_t>(files[i], "bytes", field, where);
    f.xxh3 = hash_value(files[i], field, where);
    m.files.push_back(std::move(f));
  }
  // Optional: a checkpoint saved without client bytes (or before they were kept) has none.
  if (j.contains("client")) {
    const json& c = member(j, "client", "manifest", where);
    const std::string file = value<std::string>(c, "file", "client", where);
    if (file != client_name) refuse(where, "client.file", str("'", file, "' is not '", client_name, "'"));
    m.client.bytes = value<std::uint64_t>(c, "bytes", "client", where);
    m.client.xxh3 = hash_value(c, "client", where);
  }
  const json& s = member(j, "loss_scaler", "manifest", where);
  loss_scaler_state& scaler = m.meta.scaler;
  scaler.scale = value<double>(s, "scale", "loss_scaler", where);
  scaler.cur_iter = value<std::int64_t>(s, "cur_iter", "loss_scaler", where);
  scaler.last_overflow_iter = value<std::int64_t>(s, "last_overflow_iter", "loss_scaler", where);
  scaler.cur_hysteresis = value<std::int64_t>(s, "cur_hysteresis", "loss_scaler", where);
  scaler.optimizer_steps = value<std::int64_t>(s, "optimizer_steps", "loss_scaler", where);
  const json& o = member(j, "optimizer", "manifest", where);
  optimizer_config& opt = m.meta.optimizer;
  opt.type = value<std::string>(o, "type", "optimizer", where);
  opt.lr = value<double>(o, "lr", "optimizer", where);
  opt.betas = two_numbers(o, "betas", "optimizer", where);
  opt.eps = value<double>(o, "eps", "optimizer", where);
  opt.weight_decay = value<double>(o, "weight_decay", "optimizer", where);
  opt.adam_w_mode = value<bool>(o, "adam_w_mode", "optimizer", where);
  opt.bias_correction = value<bool>(o, "bias_correction", "optimizer", where);
  m.meta.lr = value<double>(j, "lr", "manifest", where);
  // Optional: a checkpoint saved before parameter groups has none.
  if (j.contains("groups")) {
    const json& groups = array_member(j, "groups", "manifest", where);
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const std::string field = str("groups[", i, "]");
      group_hyper g{.lr = value<double>(groups[i], "lr", field, where),
                    .weight_decay = value<double>(groups[i], "weight_decay", field, where),
                    .betas = opt.betas,
                    .eps = opt.eps};
      // Optional: a checkpoint saved before groups kept their own betas and eps stepped every
      // group with the optimizer's.
      if (groups[i].contains("betas")) g.betas = two_numbers(groups[i], "betas", field, where);
      if (groups[i].contains("eps")) g.eps = value<double>(groups[i], "eps", field, where);
      m.meta.groups.push_back(g);
    }
  }
  return m;
}

void check_model(const manifest& m, const model_layout& layout, const std::filesystem::path& where) {
  const std::vector<manifest_parameter> here = describe_model(layout);
  const std::size_t common = std::min(here.size(), m.model.size());
  for (std::size_t i = 0; i < common; ++i) {
    const manifest_parameter& a = m.model[i];
    const manifest_parameter& b = here[i];
    const std::string prefix = str("checkpoint '", where.parent_path().string(), "' is of another model: parameter ", i,
                                   " is '", a.module, "/", a.name, "' ");
    if (a.module != b.module || a.name != b.name) {
      throw checkpoint_error(str(prefix, "in '", where.string(), "', '", b.module, "/", b.name, "' here"));
    }
    if (a.shape != b.shape) {
      throw checkpoint_error(
          str(prefix, "of shape ", shape_text(a.shape), " in '", where.string(), "', ", shape_text(b.shape), " here"));
    }
    if (a.dtype != b.dtype) {
      throw checkpoint_error(str(prefix, "of dtype ", kernels::dtype_name(a.dtype), " in '", where.string(), "', ",
                                 kernels::dtype_name(b.dtype), " here"));
    }
  }
  if (here.size() != m.model.size()) {
    throw checkpoint_error(str("checkpoint '", where.parent_path().string(), "' is of another model: '", where.string(),
                               "' lists ", m.model.size(), " parameters, this model has ", here.size()));
  }
}

}  // namespace zoe::engine::detail
