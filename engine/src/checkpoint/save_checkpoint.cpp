// save_checkpoint: the crash-safe sequence of checkpoint.hpp. The states are written into a
// staging folder (root/.<tag>.partial), each file under a temporary name, synced and renamed; the
// folder synced; the manifest last, the same way; then the folder is moved to root/tag (exchanged
// with an older checkpoint of that tag) and root synced; then `latest` replaced the same way and
// root synced again. A crash at any point leaves root/latest naming a complete checkpoint.

#include "checkpoint_format.hpp"
#include "manifest.hpp"
#include "state_source.hpp"
#include "xxh3_stream.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"

namespace zoe::engine {

namespace {

using detail::state_file;

/// Creates root and the folders above it that are missing, each made durable in its parent.
void make_root(checkpoint_fs& fs, const std::filesystem::path& root) {
  if (fs.exists(root)) return;
  // "a/b/" names the folder "a/b": its parent is "a".
  const std::filesystem::path folder = root.has_filename() ? root : root.parent_path();
  const std::filesystem::path parent = folder.parent_path();
  if (!parent.empty() && parent != folder) make_root(fs, parent);
  fs.create_directory(folder);
  fs.sync_directory(parent.empty() ? std::filesystem::path(".") : parent);
}

void check_resident(const tier_manager& tiers, const std::vector<state_kind>& states) {
  for (const parameter_layout& p : tiers.layout().parameters()) {
    for (const state_kind s : states) {
      if (detail::real_bytes(p, s) == 0) continue;
      const state_status status = tiers.status(p.id, s);
      ZOE_EXPECTS(status == state_status::resident, "cannot save a checkpoint: the ", state_kind_name(s),
                  " state of parameter '", p.name, "' is ", state_status_name(status),
                  " (every state but the gradient must be resident)");
    }
  }
}

/// Writes one file per state into `folder` from `source`, recording each in `files`.
void write_state_files(checkpoint_fs& fs, const std::filesystem::path& folder, const model_layout& layout,
                       detail::state_source& source, const std::vector<state_kind>& states,
                       std::vector<detail::manifest_file>& files) {
  std::optional<detail::state_piece> piece = source.next();
  for (const state_kind s : states) {
    const std::filesystem::path path = folder / state_file(s);
    std::filesystem::path temp = path;
    temp += detail::temp_suffix;
    detail::xxh3_stream hash;
    {
      const auto writer = fs.create(temp);
      // append() copies the piece and writes it in the background while the source's thread
      // reads the next piece: the drive and the state reads overlap.
      for (; piece && piece->state == s; piece = source.next()) {
        hash.update(piece->bytes);
        writer->append(piece->bytes);
      }
      writer->sync();
      ZOE_ASSERT(writer->size() == detail::file_bytes(layout, s));
    }
    fs.rename(temp, path);
    files.push_back({s, state_file(s), detail::file_bytes(layout, s), hash.digest()});
  }
  ZOE_ASSERT(!piece);
}

void remove_quietly(checkpoint_fs& fs, const std::filesystem::path& folder) noexcept {
  try {
    detail::remove_flat_folder(fs, folder);
  } catch (const std::exception& e) {
    log::warn("checkpoint save: cannot remove '", folder.string(),
              "' (the next save of its tag removes it): ", e.what());
  }
}

}  // namespace

void save_checkpoint(const std::filesystem::path& root, const std::string& tag, tier_manager& tiers, state_io& io,
                     const checkpoint_meta& meta, checkpoint_fs& fs) {
  ZOE_EXPECTS(detail::valid_tag(tag), "checkpoint tag '", tag,
              "' is not a plain folder name (not empty, no '/', not starting with '.', not 'latest')");
  const model_layout& layout = tiers.layout();
  ZOE_EXPECTS(layout.options().world_size == 1, "checkpoints are written at world size 1; this layout has ",
              layout.options().world_size, " ranks");
  const std::vector<state_kind> states = detail::saved_states(layout);
  check_resident(tiers, states);

  make_root(fs, root);
  const std::filesystem::path staging = detail::staging_folder(root, tag);
  const std::filesystem::path final_folder = root / tag;
  detail::manifest m{detail::checkpoint_format_version, tag, detail::describe_model(layout), {}, meta};
  bool placed = false;  // root/tag is the new checkpoint (what staging holds then is the old one)
  try {
    detail::remove_flat_folder(fs, staging);  // left by a save that failed or crashed
    fs.create_directory(staging);
    {
      detail::state_source source(tiers, io, states, detail::piece_bytes);
      write_state_files(fs, staging, layout, source, states, m.files);
    }
    fs.sync_directory(staging);
    detail::write_durably(fs, staging / detail::manifest_name, detail::to_json(m));
    fs.sync_directory(staging);
    if (fs.exists(final_folder)) {
      // Atomic: after a crash root/tag is the old checkpoint or the new one, both complete.
      fs.exchange(staging, final_folder);
    } else {
      fs.rename(staging, final_folder);
    }
    placed = true;
    fs.sync_directory(root);
    detail::write_durably(fs, root / detail::latest_name, tag + "\n");
    fs.sync_directory(root);
  } catch (...) {
    if (!placed) remove_quietly(fs, staging);
    throw;
  }
  remove_quietly(fs, staging);  // the checkpoint this one replaced, if any
}

}  // namespace zoe::engine
