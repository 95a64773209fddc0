// save_checkpoint: the crash-safe sequence of checkpoint.hpp. The states (and the client bytes) are
// written into a staging folder (root/.<tag>.partial), each file under a temporary name, synced and
// renamed; the folder synced; the manifest last, the same way; then the folder is moved to root/tag (exchanged
// with an older checkpoint of that tag) and root synced; then `latest` replaced the same way and
// root synced again. A crash at any point leaves root/latest naming a complete checkpoint.
//
// On many ranks rank 0 runs that sequence alone; the other ranks' real elements reach it through
// the communicator, in file order, and the ranks' verdicts are combined after each phase (the
// checks, the files, the manifest and the renames), so every rank ends the same way.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>

#include "aligned_buffer.hpp"
#include "checkpoint_format.hpp"
#include "manifest.hpp"
#include "rank_link.hpp"
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

/// A checkpoint holds finite numbers only: JSON has no inf or NaN (nlohmann would write null), and
/// a manifest holding null is one no load takes, after `latest` has moved to it.
void check_finite(const checkpoint_meta& meta) {
  const auto expect_finite = [](double value, std::string_view field) {
    ZOE_EXPECTS(std::isfinite(value), "cannot save a checkpoint: ", field, " is ", value,
                " (a checkpoint keeps finite numbers only)");
  };
  expect_finite(meta.scaler.scale, "loss_scaler.scale");
  expect_finite(meta.optimizer.lr, "optimizer.lr");
  expect_finite(meta.optimizer.betas[0], "optimizer.betas[0]");
  expect_finite(meta.optimizer.betas[1], "optimizer.betas[1]");
  expect_finite(meta.optimizer.eps, "optimizer.eps");
  expect_finite(meta.optimizer.weight_decay, "optimizer.weight_decay");
  expect_finite(meta.lr, "lr");
  for (const group_hyper& g : meta.groups) {
    expect_finite(g.lr, "groups.lr");
    expect_finite(g.weight_decay, "groups.weight_decay");
    expect_finite(g.betas[0], "groups.betas[0]");
    expect_finite(g.betas[1], "groups.betas[1]");
    expect_finite(g.eps, "groups.eps");
  }
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

/// Writes the state files: every rank takes part, rank 0 writes. The constructor throws (memory for
/// the staging buffers refused): the caller combines that with the other ranks' verdicts before
/// the first file. Each other rank's pieces go to rank 0 alone (point to point, not broadcast).
/// Afterwards the first failure on this rank is kept in `failure` and ends this
/// rank's reading and writing, but not its part in the transfers (it sends zeros), so that the
/// ranks reach the verdict together. The communicator's own failures (a rank that vanished) are
/// thrown.
class state_stream {
 public:
  state_stream(checkpoint_fs& fs, const std::filesystem::path& folder, tier_manager& tiers, state_io& io,
               const std::vector<state_kind>& states, detail::rank_link& link, std::exception_ptr& failure)
      : fs_(fs),
        folder_(folder),
        layout_(tiers.layout()),
        link_(link),
        failure_(failure),
        source_(tiers, io, states, detail::piece_bytes, link.rank()) {
    if (layout_.options().world_size > 1) transfer_ = detail::aligned_buffer(transfer_bytes(states));
  }

  /// Streams state `s`'s file; on rank 0 records it in `files`.
  void write_file(state_kind s, std::vector<detail::manifest_file>& files) {
    const std::filesystem::path path = folder_ / state_file(s);
    std::filesystem::path temp = path;
    temp += detail::temp_suffix;
    const bool writes = link_.rank() == 0;
    hash_ = std::make_unique<detail::xxh3_stream>();
    if (writes && !failure_) attempt([&] { writer_ = fs_.create(temp); });
    for (const parameter_layout& p : layout_.parameters()) {
      // The file's part for p: each shard's real elements in order, shard q from rank q, in pieces
      // every rank cuts alike (at multiples of piece_bytes, where the state_source cuts too). A
      // layout held whole by every rank (stage 0) is one shard, rank 0's: the replicas send nothing
      // (their state_source has no real bytes past shard 0 to read).
      for (std::size_t q = 0; q < layout_.options().world_size; ++q) {
        const std::uint64_t real = detail::shard_real_bytes(p, s, q);
        for (std::uint64_t at = 0; at < real;) {
          const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(detail::piece_bytes, real - at));
          if (q == 0) {
            // Rank 0's own bytes go straight to its file.
            if (writes) append(own(s, p.id, n));
          } else {
            const std::span<std::byte> buffer = transfer_.span().first(n);
            if (link_.rank() == q) {
              const std::span<const std::byte> mine = own(s, p.id, n);
              if (mine.empty()) {
                std::memset(buffer.data(), 0, n);
              } else {
                std::memcpy(buffer.data(), mine.data(), n);
              }
            }
            link_.send_to(buffer, q, 0);
            if (writes) append(buffer);
          }
          at += n;
        }
      }
    }
    if (!writer_ || failure_) return;
    attempt([&] {
      // append() copies each piece and writes it in the background while the next one is read
      // or received: the drive, the state reads and the transfers overlap.
      writer_->sync();
      ZOE_ASSERT(writer_->size() == detail::file_bytes(layout_, s));
      writer_.reset();
      fs_.rename(temp, path);
      files.push_back({s, state_file(s), detail::file_bytes(layout_, s), hash_->digest()});
    });
  }

 private:
  /// The largest piece another rank sends: rank 0's shard holds the most real elements.
  [[nodiscard]] std::size_t transfer_bytes(const std::vector<state_kind>& states) const {
    std::uint64_t largest = 1;
    for (const parameter_layout& p : layout_.parameters()) {
      for (const state_kind s : states) largest = std::max(largest, detail::shard_real_bytes(p, s, 0));
    }
    return static_cast<std::size_t>(std::min<std::uint64_t>(largest, detail::piece_bytes));
  }

  void fail() noexcept {
    if (!failure_) failure_ = std::current_exception();
    writer_.reset();
  }

  template <typename Action>
  void attempt(Action&& action) noexcept {
    try {
      action();
    } catch (...) {
      fail();
    }
  }

  /// The next `n` bytes of this rank's state `s` of `p`; empty once something failed here.
  std::span<const std::byte> own(state_kind s, parameter_id p, std::size_t n) {
    std::span<const std::byte> out;
    if (failure_) return out;
    attempt([&] {
      if (rest_.empty()) {
        const std::optional<detail::state_piece> piece = source_.next();
        ZOE_ASSERT(piece && piece->state == s && piece->param == p);
        rest_ = piece->bytes;
      }
      ZOE_ASSERT(rest_.size() >= n);
      out = rest_.first(n);
      rest_ = rest_.subspan(n);
    });
    return out;
  }

  void append(std::span<const std::byte> bytes) {
    if (!writer_ || failure_ || bytes.empty()) return;
    attempt([&] {
      hash_->update(bytes);
      writer_->append(bytes);
    });
  }

  checkpoint_fs& fs_;
  const std::filesystem::path& folder_;
  const model_layout& layout_;
  detail::rank_link& link_;
  std::exception_ptr& failure_;
  detail::state_source source_;
  std::span<const std::byte> rest_;  // what is left of this rank's current piece
  detail::aligned_buffer transfer_;
  std::unique_ptr<detail::xxh3_stream> hash_;
  std::unique_ptr<checkpoint_writer> writer_;
};

void remove_quietly(checkpoint_fs& fs, const std::filesystem::path& folder) noexcept {
  try {
    detail::remove_flat_folder(fs, folder);
  } catch (const std::exception& e) {
    log::warn("checkpoint save: cannot remove '", folder.string(),
              "' (the next save of its tag removes it): ", e.what());
  }
}

void save_on(detail::rank_link& link, const std::filesystem::path& root, const std::string& tag, tier_manager& tiers,
             state_io& io, const checkpoint_meta& meta, checkpoint_fs& fs) {
  const std::string problem = detail::tag_problem(tag);
  ZOE_EXPECTS(problem.empty(), "checkpoint tag '", tag, "' ", problem);
  const model_layout& layout = tiers.layout();
  ZOE_EXPECTS(layout.ranks() == link.size(), "cannot save a checkpoint: the layout is for ", layout.ranks(),
              " ranks, the communicator has ", link.size());
  const std::vector<state_kind> states = detail::saved_states(layout);
  const bool writes = link.rank() == 0;
  const std::filesystem::path staging = detail::staging_folder(root, tag);
  const std::filesystem::path final_folder = root / tag;
  detail::manifest m{.format_version = detail::checkpoint_format_version,
                     .tag = tag,
                     .model = detail::describe_model(layout),
                     .meta = meta};
  bool staged = false;  // staging may hold this save's files
  bool placed = false;  // root/tag is the new checkpoint (what staging holds then is the old one)
  try {
    std::exception_ptr failure;
    std::optional<state_stream> stream;
    try {
      check_resident(tiers, states);
      if (writes) {
        check_finite(meta);
        // Exchanged with the new folder, a link would be removed as the old checkpoint, through
        // it: the checkpoint it names would be lost. What the user meant by it is not ours to
        // guess.
        ZOE_EXPECTS(!fs.is_link(final_folder), "cannot save checkpoint tag '", tag, "': '", final_folder.string(),
                    "' is a symbolic link, which a save neither replaces nor writes through; remove the link or "
                    "save under another tag");
        make_root(fs, root);
        staged = true;
        detail::remove_flat_folder(fs, staging);  // left by a save that failed or crashed
        fs.create_directory(staging);
      }
      stream.emplace(fs, staging, tiers, io, states, link, failure);
    } catch (...) {
      failure = std::current_exception();
    }
    link.agree(failure);

    for (const state_kind s : states) stream->write_file(s, m.files);
    stream.reset();  // lets go of the states
    link.agree(failure);

    if (writes) {
      try {
        if (!meta.client.empty()) {
          detail::write_durably(fs, staging / detail::client_name, meta.client);
          m.client = {.bytes = meta.client.size(), .xxh3 = detail::hash_of(meta.client)};
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
        failure = std::current_exception();
      }
    }
    link.agree(failure);
  } catch (...) {
    if (staged && !placed) remove_quietly(fs, staging);
    throw;
  }
  if (writes) remove_quietly(fs, staging);  // the checkpoint this one replaced, if any
}

}  // namespace

void save_checkpoint(const std::filesystem::path& root, const std::string& tag, tier_manager& tiers, state_io& io,
                     const checkpoint_meta& meta, checkpoint_fs& fs) {
  detail::rank_link alone;
  save_on(alone, root, tag, tiers, io, meta, fs);
}

void save_checkpoint(const std::filesystem::path& root, const std::string& tag, tier_manager& tiers, state_io& io,
                     const checkpoint_meta& meta, const checkpoint_ranks& ranks, checkpoint_fs& fs) {
  detail::rank_link link(ranks.comm, ranks.dev, detail::piece_bytes);
  save_on(link, root, tag, tiers, io, meta, fs);
}

}  // namespace zoe::engine
