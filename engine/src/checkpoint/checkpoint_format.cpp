#include "checkpoint_format.hpp"

#include "zoe/core/str.hpp"

namespace zoe::engine::detail {

std::string state_file(state_kind s) { return str(state_kind_name(s), ".bin"); }

std::vector<state_kind> saved_states(const model_layout& layout) {
  std::vector<state_kind> out;
  if (file_bytes(layout, state_kind::working) > 0) out.push_back(state_kind::working);
  out.insert(out.end(), {state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq});
  return out;
}

std::uint64_t real_bytes(const parameter_layout& p, state_kind s) noexcept {
  if (state_bytes(p, s) == 0) return 0;
  return p.numel * kernels::dtype_size(state_dtype(p, s));
}

std::uint64_t shard_real_bytes(const parameter_layout& p, state_kind s, std::size_t rank) noexcept {
  if (state_bytes(p, s) == 0) return 0;
  return p.real_numel(rank) * kernels::dtype_size(state_dtype(p, s));
}

std::uint64_t file_bytes(const model_layout& layout, state_kind s) noexcept {
  std::uint64_t total = 0;
  for (const parameter_layout& p : layout.parameters()) total += real_bytes(p, s);
  return total;
}

std::string tag_problem(std::string_view tag) {
  if (tag.empty()) return "is empty";
  if (tag.size() > 200) return str("has ", tag.size(), " characters, more than 200");
  if (tag.find('/') != std::string_view::npos) return "holds a '/' (a tag is a plain folder name)";
  if (tag.find('\0') != std::string_view::npos) return "holds a NUL character";
  if (tag.front() == '.') return "starts with '.', as the folders a save builds in do";
  // A checkpoint folder at either name would stop `latest` from ever being written again.
  if (tag == latest_name || tag == str(latest_name, temp_suffix)) {
    return "is a name a save writes in the checkpoint root, beside the checkpoints";
  }
  return {};
}

std::filesystem::path staging_folder(const std::filesystem::path& root, std::string_view tag) {
  return root / str(".", tag, ".partial");
}

std::string read_whole(checkpoint_fs& fs, const std::filesystem::path& path) {
  const auto reader = fs.open(path);
  std::string text(reader->size(), '\0');
  reader->read(0, std::as_writable_bytes(std::span(text)));
  return text;
}

void write_durably(checkpoint_fs& fs, const std::filesystem::path& path, std::string_view text) {
  std::filesystem::path temp = path;
  temp += temp_suffix;
  // A file left there by a crash is garbage; a link there would have create() write through it.
  fs.remove(temp);
  {
    const auto writer = fs.create(temp);
    writer->append(std::as_bytes(std::span(text)));
    writer->sync();
  }
  fs.rename(temp, path);
}

void remove_flat_folder(checkpoint_fs& fs, const std::filesystem::path& path) {
  if (!fs.exists(path)) return;
  if (fs.is_link(path)) {
    // Listing it would list (and remove) what it names, outside the root.
    fs.remove(path);
    return;
  }
  for (const std::string& name : fs.list(path)) fs.remove(path / name);
  fs.remove(path);
}

}  // namespace zoe::engine::detail
