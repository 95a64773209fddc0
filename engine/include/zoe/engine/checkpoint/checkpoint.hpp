#pragma once
// Checkpoints: every state of every shard of this rank, the loss scaler (with the step count that
// bias correction uses) and the optimizer settings, saved to a folder so that a crash at any point
// of a save leaves the previous checkpoint loadable, and loaded back into any placement (states
// saved from NVMe load into memory and the other way round).
//
// Layout of a checkpoint root:
//   ROOT/<tag>/            one folder per checkpoint (the engine's tags are "step-<n>")
//     <state>.bin          one file per state kind: each parameter's real (unpadded) elements in
//                          layout order, at the state's dtype, so the files do not depend on the
//                          world size or on where the states lived
//     manifest.json        written last: format version, the model (names, shapes, dtypes), each
//                          file's size and XXH3-64, the scaler state, the optimizer settings,
//                          and its own XXH3-64 (manifest_xxh3), so a changed value is refused too
//   ROOT/latest            the tag of the newest complete checkpoint (replaced atomically)
//   ROOT/.<tag>.partial/   where a save builds <tag> (removed by the save; one left by a crash is
//                          removed by the next save of that tag)
// The folder is built as ROOT/.<tag>.partial: each file written under a temporary name, fsynced and
// renamed; the folder fsynced; then the manifest the same way and the folder fsynced again. It is
// then renamed to ROOT/<tag> (atomically exchanged with an older ROOT/<tag>, so that one stays
// whole until the new one is) and ROOT fsynced; then `latest` is written the same way, and ROOT
// fsynced. A crash at any point leaves `latest` naming a complete checkpoint. Loading validates the
// manifest, the model, every size and every checksum before it overwrites any state, and names the
// file and what is wrong. The gradient state is not saved: a checkpoint is taken between steps,
// where the next micro-batch overwrites the gradient.
//
// NVMe states go to and from the checkpoint files through the I/O engine (state_io), never
// through a tensor library. A save reads the next piece of a state (state_io on a thread of its
// own, in pieces of 4 MiB; a host home whole and in place) while it writes the one before: it holds
// two pieces of staging memory besides the homes, and the file system's write buffers
// (checkpoint_fs.hpp). A load reads each file twice (its checksum, then its states), in pieces, into
// a host home in place or through state_io from one piece of staging memory.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "zoe/engine/checkpoint/checkpoint_fs.hpp"
#include "zoe/engine/config/config.hpp"
#include "zoe/engine/optim/loss_scaler.hpp"
#include "zoe/engine/swap/state_io.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"

namespace zoe::engine {

/// A checkpoint that cannot be loaded (missing, torn, corrupt, or of another model): the message
/// names the file and what is wrong.
class checkpoint_error : public error {
 public:
  explicit checkpoint_error(const std::string& m) : error(error_category::corrupt, m) {}
};

/// What a checkpoint keeps besides the states.
struct checkpoint_meta {
  loss_scaler_state scaler;    ///< the scale and the step count bias correction uses
  optimizer_config optimizer;  ///< the settings the states were stepped with
  double lr = 0;               ///< the learning rate of the last step taken
};

/// Saves every state but the gradient of every parameter of `tiers`' layout (which must all be
/// resident) under root/tag, then points root/latest at it. root is created when missing; a
/// checkpoint of the same tag already there is replaced only once the new one is complete (root/tag
/// is always one or the other, whole, even across a crash).
/// Throws io_error naming the path when a write, fsync or rename fails: the previous checkpoint
/// and `latest` are untouched then, except after a failure of the very last fsync of root, when
/// `latest` may already name the new (complete) checkpoint. Throws usage_error for a tag that is
/// not a plain folder name or a state not resident (before writing anything), and what state_io
/// throws for a state it cannot read. `io` is driven by a thread of the save's own while it runs.
void save_checkpoint(const std::filesystem::path& root, const std::string& tag, tier_manager& tiers, state_io& io,
                     const checkpoint_meta& meta, checkpoint_fs& fs = checkpoint_fs::posix());

/// The tag root/latest names; nullopt when there is none. Throws checkpoint_error when it exists
/// but is unreadable or names no folder.
[[nodiscard]] std::optional<std::string> latest_checkpoint(const std::filesystem::path& root,
                                                           checkpoint_fs& fs = checkpoint_fs::posix());

/// Loads root/tag (root/latest when tag is empty) into every state but the gradient (the gradient
/// states are left as they are), and returns what the checkpoint keeps besides the states.
/// Validates everything first: checkpoint_error naming the file for no `latest` (tag empty), a
/// missing folder, a missing or unreadable manifest, another format version, a model that differs
/// (naming the parameter), a missing file, a file of the wrong size, or a checksum that does not
/// match; usage_error for a tag that is not a plain folder name or a state in flight; nothing is
/// changed then. A failure while writing the states (an io_error from an NVMe home, or a file that
/// changed after it was validated: checkpoint_error) leaves them partly loaded: load again.
/// `accept`, when given, sees the checkpoint's meta once everything above is validated and before
/// any state changes; a usage_error it throws (the meta cannot serve the caller: a scaler state the
/// configuration refuses) comes out as checkpoint_error naming the manifest, nothing changed.
[[nodiscard]] checkpoint_meta load_checkpoint(const std::filesystem::path& root, const std::string& tag,
                                              tier_manager& tiers, state_io& io,
                                              checkpoint_fs& fs = checkpoint_fs::posix(),
                                              const std::function<void(const checkpoint_meta&)>& accept = {});

}  // namespace zoe::engine
