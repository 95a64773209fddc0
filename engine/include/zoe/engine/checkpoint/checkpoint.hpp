#pragma once
// Checkpoints: every state of every shard (of every rank), the loss scaler (with the step count that
// bias correction uses) and the optimizer settings, saved to a folder so that a crash at any point
// of a save leaves the previous checkpoint loadable, and loaded back into any placement (states
// saved from NVMe load into memory and the other way round).
//
// Layout of a checkpoint root:
//   ROOT/<tag>/            one folder per checkpoint (the engine's tags are "step-<n>")
//     <state>.bin          one file per state kind: each parameter's real (unpadded) elements in
//                          layout order, at the state's dtype, so the files do not depend on the
//                          world size or on where the states lived
//     client.bin           the caller's opaque bytes (checkpoint_meta::client), when it gave any
//     manifest.json        written last: format version, the model (names, shapes, dtypes), each
//                          file's size and XXH3-64 (client.bin's too), the scaler state, the
//                          optimizer settings, and its own XXH3-64 (manifest_xxh3), so a changed
//                          value is refused too
//   ROOT/latest            the tag of the newest complete checkpoint (replaced atomically; written
//                          as ROOT/latest.tmp, then renamed)
//   ROOT/.<tag>.partial/   where a save builds <tag> (removed by the save; one left by a crash is
//                          removed by the next save of that tag)
// A tag is a plain folder name that is none of the names a save writes in ROOT: not starting with
// '.', not "latest" or "latest.tmp"; any other tag is refused before anything is written.
//
// Symbolic links in ROOT (ROOT itself may be one): a save never follows, renames or removes
// anything a link in ROOT names. A tag that is a link (an alias, `ln -s step-1 ROOT/best`) is
// refused by a save, naming the link: replacing the alias with a checkpoint of its own is not
// what every user who made one means, and the old folder a save replaces is removed afterwards,
// which through the link would remove the checkpoint it names. A link at a name the save writes
// (ROOT/.<tag>.partial, ROOT/latest.tmp, ROOT/latest) is replaced itself. A load only reads, and
// validates everything it reads: it follows a tag (or the tag `latest` names) that is a link,
// wherever it points, so an alias loads the checkpoint it names.
// The folder is built as ROOT/.<tag>.partial: each file written under a temporary name, fsynced and
// renamed; the folder fsynced; then the manifest the same way and the folder fsynced again. It is
// then renamed to ROOT/<tag> (atomically exchanged with an older ROOT/<tag>, so that one stays
// whole until the new one is) and ROOT fsynced; then `latest` is written the same way, and ROOT
// fsynced. A crash at any point leaves `latest` naming a complete checkpoint. Loading validates the
// manifest, the model, every size and every checksum before it overwrites any state, and names the
// file and what is wrong. The gradient state is not saved: a checkpoint is taken between steps,
// where the next micro-batch overwrites the gradient.
//
// Many ranks: the files do not depend on the world size, so a checkpoint saved by N ranks loads on
// any number of ranks (saved on 4, loaded on 1, 2 or 4), with no conversion step. Save and load
// are collective (every rank of the communicator calls them, with the same root, tag and model),
// and ROOT must be one folder every rank sees (a shared file system, as on a real cluster; the
// ranks' own swap folders may be local). A save streams each file from rank 0: for each state,
// each parameter and each rank in order, that rank's real elements go to rank 0 through the
// communicator (broadcast, in pieces of 4 MiB) and rank 0 appends them, so the file is written
// once, in layout order, hashed as it goes; only rank 0 touches the file system. A load
// validates on every rank (each reads the manifest and checks every file's size; the files'
// checksums are split over the ranks, file i on rank i mod N; client.bin every rank reads and
// checks whole, since every rank returns it), combines the verdicts, and only then has each rank
// read its own slices (its shard's real elements) straight from the files.
// Every verdict is combined with a collective: when one rank fails (a corrupt file, an I/O
// error, a state it cannot read) every rank throws that rank's error ("rank r of N: " and the
// message naming the file), and a rank that failed mid-stream goes on taking part (sending
// zeros, writing nothing) until the verdict, so no rank waits for ever. A rank that reads only
// its own slices cannot re-check the whole file's checksum as it loads: at world size > 1 a file
// changed by someone else between the validation and the load is not noticed (at world size 1
// it is). Each broadcast sends its piece to every rank though only rank 0 keeps it (the
// communicator has no gather): a save moves (N - 1) times the bytes other ranks own. A layout held
// whole by every rank (stage 0, layout_options::replicas) is saved from rank 0's copy alone, with
// no transfers, and every rank loads (and re-hashes) the whole files.
//
// NVMe states go to and from the checkpoint files through the I/O engine (state_io), never
// through a tensor library. A save reads the next piece of a state (state_io on a thread of its
// own, in pieces of 4 MiB; a host home whole and in place) while it writes the one before: it holds
// two pieces of staging memory besides the homes, and the file system's write buffers
// (checkpoint_fs.hpp); at world size > 1 one more piece for the transfers (and, off the host
// device, one of device memory). A load reads each file twice (its checksum, then its states), in
// pieces, into a host home in place or through state_io from one piece of staging memory; at world
// size > 1 a rank reads whole only the files whose checksums it checks, and its own slices of all.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/checkpoint/checkpoint_fs.hpp"
#include "zoe/engine/comm/communicator.hpp"
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
  double lr = 0;               ///< the learning rate of the last step taken (group 0's)
  /// Each parameter group's settings at the last step taken; empty in a checkpoint saved before
  /// groups were kept (every group then had `lr` and optimizer.weight_decay).
  std::vector<group_hyper> groups;
  /// Opaque bytes of the caller's (a framework's scheduler, data position, RNG states), kept in
  /// client.bin under the manifest's checksum; empty: none (no file). At several ranks rank 0's
  /// are saved, and every rank loads them.
  std::string client;
};

/// The ranks that save or load a checkpoint together: every rank of `comm` (a world whose size is
/// the layout's world_size, whose collectives run on `dev`, and which no other thread uses while
/// the save or load runs). Both must outlive the call.
struct checkpoint_ranks {
  communicator& comm;
  device& dev;
};

/// Saves every state but the gradient of every parameter of `tiers`' layout (which must all be
/// resident) under root/tag, then points root/latest at it. root is created when missing; a
/// checkpoint of the same tag already there is replaced only once the new one is complete (root/tag
/// is always one or the other, whole, even across a crash).
/// Throws io_error naming the path when a write, fsync or rename fails: the previous checkpoint
/// and `latest` are untouched then, except after a failure of the very last fsync of root, when
/// `latest` may already name the new (complete) checkpoint. Throws usage_error, before writing
/// anything, for a tag that is not a plain folder name or is a name a save writes in root (naming
/// the tag), a root/tag that is a symbolic link (naming it), a number of `meta` that is not finite
/// (naming the field: a loss scale that overflowed to inf would make a checkpoint no load takes),
/// or a state not resident; and what state_io throws for a state it cannot read. `io` is driven by
/// a thread of the save's own while it runs.
/// This is the one-process form (world size 1); usage_error for a layout of more ranks.
void save_checkpoint(const std::filesystem::path& root, const std::string& tag, tier_manager& tiers, state_io& io,
                     const checkpoint_meta& meta, checkpoint_fs& fs = checkpoint_fs::posix());
/// save_checkpoint on every rank of `ranks` (collective; see the top of this file): `tiers` holds
/// this rank's shards, rank 0 writes (root/tag, `latest`, with rank 0's `meta`) through its `fs`.
/// Every rank returns once the checkpoint is complete, or throws the error of the lowest rank that
/// failed (prefixed "rank r of N: "), the previous checkpoint and `latest` left as said above.
/// usage_error when the layout's world size is not the communicator's; comm_error when a rank
/// fails or vanishes in a collective.
void save_checkpoint(const std::filesystem::path& root, const std::string& tag, tier_manager& tiers, state_io& io,
                     const checkpoint_meta& meta, const checkpoint_ranks& ranks,
                     checkpoint_fs& fs = checkpoint_fs::posix());

/// The tag root/latest names; nullopt when there is none. Throws checkpoint_error when it exists
/// but is unreadable or names no folder.
[[nodiscard]] std::optional<std::string> latest_checkpoint(const std::filesystem::path& root,
                                                           checkpoint_fs& fs = checkpoint_fs::posix());

/// Loads root/tag (root/latest when tag is empty; either may be a symbolic link, followed) into
/// every state but the gradient (the gradient states are left as they are), and returns what the
/// checkpoint keeps besides the states. Validates everything first: checkpoint_error naming the
/// file for no `latest` (tag empty), a missing folder, a missing or unreadable manifest, a manifest
/// that fails its own checksum (checked before anything it says is believed), another format
/// version, a model that differs (naming the parameter), a missing file, a file of the wrong size,
/// or a checksum that does not match; usage_error for a tag save_checkpoint refuses (but for being
/// a link) or a state in flight; nothing is changed then. A failure while writing the states (an
/// io_error from an NVMe home, or a file that changed after it was validated: checkpoint_error)
/// leaves them partly loaded: load again.
/// `accept`, when given, sees the checkpoint's meta once everything above is validated and before
/// any state changes; a usage_error it throws (the meta cannot serve the caller: a scaler state the
/// configuration refuses) comes out as checkpoint_error naming the manifest, nothing changed.
/// This is the one-process form (world size 1); usage_error for a layout of more ranks.
[[nodiscard]] checkpoint_meta load_checkpoint(const std::filesystem::path& root, const std::string& tag,
                                              tier_manager& tiers, state_io& io,
                                              checkpoint_fs& fs = checkpoint_fs::posix(),
                                              const std::function<void(const checkpoint_meta&)>& accept = {});
/// load_checkpoint on every rank of `ranks` (collective; see the top of this file), whatever the
/// world size the checkpoint was saved at: rank 0 resolves `latest`; every rank validates as
/// above (and runs `accept`) before any rank changes a state, and when any rank refuses, every
/// rank throws that rank's error (prefixed "rank r of N: ", naming the file), no state changed on
/// any rank. A failure while the states are written fails every rank the same way, the states
/// partly loaded. usage_error when the layout's world size is not the communicator's.
[[nodiscard]] checkpoint_meta load_checkpoint(const std::filesystem::path& root, const std::string& tag,
                                              tier_manager& tiers, state_io& io, const checkpoint_ranks& ranks,
                                              checkpoint_fs& fs = checkpoint_fs::posix(),
                                              const std::function<void(const checkpoint_meta&)>& accept = {});

}  // namespace zoe::engine
