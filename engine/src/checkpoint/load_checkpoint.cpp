// latest_checkpoint and load_checkpoint: everything is validated (manifest, format version, model,
// each file's size and XXH3) before the first state is overwritten. On many ranks every rank
// validates (the checksums split over the ranks), the verdicts are combined, and each rank then
// reads its own slices of the files.

#include <algorithm>
#include <cstring>

#include "aligned_buffer.hpp"
#include "checkpoint_format.hpp"
#include "manifest.hpp"
#include "rank_link.hpp"
#include "xxh3_stream.hpp"
#include "zoe/core/check.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"

namespace zoe::engine {

namespace {

std::string quoted(const std::filesystem::path& p) { return str("'", p.string(), "'"); }

detail::manifest read_manifest(checkpoint_fs& fs, const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / detail::manifest_name;
  if (!fs.exists(folder)) throw checkpoint_error(str("checkpoint folder ", quoted(folder), " does not exist"));
  if (!fs.exists(path)) {
    throw checkpoint_error(str("checkpoint manifest ", quoted(path),
                               " is missing: the folder is not a complete checkpoint (a save that did not finish)"));
  }
  std::string text;
  try {
    text = detail::read_whole(fs, path);
  } catch (const io_error& e) {
    throw checkpoint_error(str("cannot read checkpoint manifest ", quoted(path), ": ", e.what()));
  }
  return detail::parse_manifest(text, path);
}

/// The manifest's entry for each saved state, in file order, checked against the model and the
/// files on disk: every file's size, and the checksum of the i-th file where i mod `ranks` is
/// `rank` (every file's at world size 1), so the ranks share the reading.
std::vector<detail::manifest_file> check_files(checkpoint_fs& fs, const std::filesystem::path& folder,
                                               const detail::manifest& m, const model_layout& layout, std::size_t rank,
                                               std::size_t ranks) {
  const std::filesystem::path manifest_path = folder / detail::manifest_name;
  const std::vector<state_kind> states = detail::saved_states(layout);
  for (const detail::manifest_file& f : m.files) {
    if (std::find(states.begin(), states.end(), f.state) == states.end()) {
      throw checkpoint_error(str("checkpoint manifest ", quoted(manifest_path), " lists a file of the ",
                                 state_kind_name(f.state), " state, which this model does not keep"));
    }
    if (std::count_if(m.files.begin(), m.files.end(),
                      [&](const detail::manifest_file& g) { return g.state == f.state; }) > 1) {
      throw checkpoint_error(str("checkpoint manifest ", quoted(manifest_path), " lists the ", state_kind_name(f.state),
                                 " state more than once"));
    }
  }
  std::vector<detail::manifest_file> out;
  detail::aligned_buffer piece;
  for (std::size_t i = 0; i < states.size(); ++i) {
    const state_kind s = states[i];
    const auto entry =
        std::find_if(m.files.begin(), m.files.end(), [&](const detail::manifest_file& f) { return f.state == s; });
    if (entry == m.files.end()) {
      throw checkpoint_error(
          str("checkpoint manifest ", quoted(manifest_path), " lists no file of the ", state_kind_name(s), " state"));
    }
    if (entry->name != detail::state_file(s)) {
      throw checkpoint_error(str("checkpoint manifest ", quoted(manifest_path), " names '", entry->name, "' for the ",
                                 state_kind_name(s), " state, not '", detail::state_file(s), "'"));
    }
    const std::uint64_t expected = detail::file_bytes(layout, s);
    if (entry->bytes != expected) {
      throw checkpoint_error(str("checkpoint manifest ", quoted(manifest_path), " gives ", entry->name, " ",
                                 entry->bytes, " bytes; the model's ", state_kind_name(s), " state has ", expected));
    }
    const std::filesystem::path path = folder / entry->name;
    if (!fs.exists(path)) throw checkpoint_error(str("checkpoint file ", quoted(path), " is missing"));
    try {
      const auto reader = fs.open(path);
      if (reader->size() != entry->bytes) {
        throw checkpoint_error(str("checkpoint file ", quoted(path), " has ", reader->size(),
                                   " bytes; the manifest says ", entry->bytes, " (truncated or torn)"));
      }
      if (i % ranks != rank) {
        out.push_back(*entry);
        continue;  // another rank checks its checksum
      }
      if (piece.size() == 0) piece = detail::aligned_buffer(detail::piece_bytes);
      detail::xxh3_stream hash;
      for (std::uint64_t at = 0; at < entry->bytes;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), entry->bytes - at));
        reader->read(at, piece.span().first(n));
        hash.update(piece.span().first(n));
        at += n;
      }
      if (hash.digest() != entry->xxh3) {
        throw checkpoint_error(str("checkpoint file ", quoted(path), " fails its checksum: XXH3 ",
                                   detail::hash_hex(hash.digest()), ", the manifest says ",
                                   detail::hash_hex(entry->xxh3), " (corrupt)"));
      }
    } catch (const io_error& e) {
      throw checkpoint_error(str("cannot read checkpoint file ", quoted(path), ": ", e.what()));
    }
    out.push_back(*entry);
  }
  return out;
}

/// The client bytes the manifest lists (client.bin), checked against their size and checksum;
/// empty when it lists none.
std::string read_client(checkpoint_fs& fs, const std::filesystem::path& folder, const detail::manifest& m) {
  if (m.client.bytes == 0) return {};
  const std::filesystem::path path = folder / detail::client_name;
  if (!fs.exists(path)) throw checkpoint_error(str("checkpoint file ", quoted(path), " is missing"));
  std::string bytes;
  try {
    bytes = detail::read_whole(fs, path);
  } catch (const io_error& e) {
    throw checkpoint_error(str("cannot read checkpoint file ", quoted(path), ": ", e.what()));
  }
  if (bytes.size() != m.client.bytes) {
    throw checkpoint_error(str("checkpoint file ", quoted(path), " has ", bytes.size(), " bytes; the manifest says ",
                               m.client.bytes, " (truncated or torn)"));
  }
  if (const std::uint64_t hash = detail::hash_of(bytes); hash != m.client.xxh3) {
    throw checkpoint_error(str("checkpoint file ", quoted(path), " fails its checksum: XXH3 ", detail::hash_hex(hash),
                               ", the manifest says ", detail::hash_hex(m.client.xxh3), " (corrupt)"));
  }
  return bytes;
}

void check_not_in_flight(const tier_manager& tiers, const std::vector<state_kind>& states) {
  for (const parameter_layout& p : tiers.layout().parameters()) {
    for (const state_kind s : states) {
      if (detail::real_bytes(p, s) == 0) continue;
      ZOE_EXPECTS(tiers.status(p.id, s) != state_status::in_flight, "cannot load a checkpoint: the ",
                  state_kind_name(s), " state of parameter '", p.name, "' is in flight");
    }
  }
}

/// Writes file `f` (validated) into state f.state of shard `rank` (of `ranks` shards) of every
/// parameter: the shard's slice of the parameter's real elements from the file, zero padding. With
/// one shard the slices are the whole file, read in order, and its checksum is checked again as it
/// is read.
void load_state(checkpoint_fs& fs, const std::filesystem::path& folder, const detail::manifest_file& f,
                tier_manager& tiers, state_io& io, detail::aligned_buffer& staging, std::size_t rank,
                std::size_t ranks) {
  const std::filesystem::path path = folder / f.name;
  const auto reader = fs.open(path);
  const state_kind s = f.state;
  detail::xxh3_stream hash;
  std::uint64_t part = 0;  // where the file's part for the parameter starts
  for (const parameter_layout& p : tiers.layout().parameters()) {
    const std::uint64_t whole = detail::real_bytes(p, s);
    if (whole == 0) continue;
    const std::uint64_t offset = part + rank * p.shard_numel * kernels::dtype_size(state_dtype(p, s));
    part += whole;
    const auto real = static_cast<std::size_t>(detail::shard_real_bytes(p, s, rank));
    const auto bytes = static_cast<std::size_t>(state_bytes(p, s));
    const state_location& home = tiers.location(p.id, s);
    if (home.where == tier::host) {
      // Straight into the home: the write move keeps every other mover off it meanwhile.
      ZOE_EXPECTS(tiers.begin_move(p.id, s, move_kind::write), "cannot load the ", state_kind_name(s),
                  " state of parameter '", p.name, "': another move has it in flight");
      try {
        if (real > 0) reader->read(offset, home.host.first(real));  // a shard of padding only reads nothing
        std::memset(home.host.data() + real, 0, bytes - real);
      } catch (...) {
        tiers.abort_move(p.id, s);
        throw;
      }
      tiers.finish_move(p.id, s);
      hash.update(home.host.first(real));
    } else {
      // Pieces that start where an NVMe write may (multiples of the write granule): the file's
      // bytes, then the zero padding up to the state's end.
      const std::uint64_t granule = io.write_granule();
      const std::uint64_t step = std::max<std::uint64_t>(detail::piece_bytes / granule, 1) * granule;
      const auto need = static_cast<std::size_t>(std::min<std::uint64_t>(step, bytes));
      if (staging.size() < need) staging = detail::aligned_buffer(need);
      for (std::uint64_t at = 0; at < bytes;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(step, bytes - at));
        const std::span<std::byte> data = staging.span().first(n);
        const auto from_file = static_cast<std::size_t>(at < real ? std::min<std::uint64_t>(n, real - at) : 0);
        if (from_file > 0) reader->read(offset + at, data.first(from_file));
        std::memset(data.data() + from_file, 0, n - from_file);
        hash.update(data.first(from_file));
        io.write(p.id, s, at, data);
        at += n;
      }
    }
  }
  if (ranks == 1 && hash.digest() != f.xxh3) {
    throw checkpoint_error(str("checkpoint file ", quoted(path), " changed while it was loaded (XXH3 ",
                               detail::hash_hex(hash.digest()), ", validated as ", detail::hash_hex(f.xxh3),
                               "): the states are partly loaded; load again"));
  }
}

}  // namespace

std::optional<std::string> latest_checkpoint(const std::filesystem::path& root, checkpoint_fs& fs) {
  const std::filesystem::path path = root / detail::latest_name;
  std::string tag;
  try {
    if (!fs.exists(path)) return std::nullopt;
    tag = detail::read_whole(fs, path);
  } catch (const io_error& e) {
    throw checkpoint_error(str("cannot read ", quoted(path), ": ", e.what()));
  }
  if (!tag.empty() && tag.back() == '\n') tag.pop_back();
  if (const std::string problem = detail::tag_problem(tag); !problem.empty()) {
    throw checkpoint_error(str(quoted(path), " holds '", tag, "', which is not a checkpoint tag: it ", problem));
  }
  bool present = false;
  try {
    present = fs.exists(root / tag);
  } catch (const io_error& e) {
    throw checkpoint_error(str("cannot look for ", quoted(root / tag), ", named by ", quoted(path), ": ", e.what()));
  }
  if (!present) {
    throw checkpoint_error(str(quoted(path), " names '", tag, "', but ", quoted(root / tag), " does not exist"));
  }
  return tag;
}

namespace {

checkpoint_meta load_on(detail::rank_link& link, const std::filesystem::path& root, const std::string& tag,
                        tier_manager& tiers, state_io& io, checkpoint_fs& fs,
                        const std::function<void(const checkpoint_meta&)>& accept) {
  std::exception_ptr failure;
  std::string chosen = tag;
  if (chosen.empty()) {
    // One rank reads `latest`, so every rank loads the same checkpoint.
    if (link.rank() == 0) {
      try {
        const std::optional<std::string> latest = latest_checkpoint(root, fs);
        if (!latest) {
          throw checkpoint_error(
              str("no checkpoint to load in ", quoted(root), ": ", quoted(root / detail::latest_name), " is missing"));
        }
        chosen = *latest;
      } catch (...) {
        failure = std::current_exception();
      }
    }
    link.agree(failure);
    link.broadcast(chosen, 0);
  }
  const std::string problem = detail::tag_problem(chosen);
  ZOE_EXPECTS(problem.empty(), "checkpoint tag '", chosen, "' ", problem);
  const model_layout& layout = tiers.layout();
  ZOE_EXPECTS(layout.ranks() == link.size(), "cannot load a checkpoint: the layout is for ", layout.ranks(),
              " ranks, the communicator has ", link.size());
  const std::filesystem::path folder = root / chosen;

  // Everything that can be refused is refused here, on every rank, before the first state changes
  // on any rank.
  detail::manifest m;
  std::vector<detail::manifest_file> files;
  try {
    check_not_in_flight(tiers, detail::saved_states(layout));
    m = read_manifest(fs, folder);
    detail::check_model(m, layout, folder / detail::manifest_name);
    files = check_files(fs, folder, m, layout, link.rank(), link.size());
    m.meta.client = read_client(fs, folder, m);
    if (accept) {
      try {
        accept(m.meta);
      } catch (const usage_error& e) {
        throw checkpoint_error(
            str(quoted(folder / detail::manifest_name), " cannot be loaded into this configuration: ", e.what()));
      }
    }
  } catch (...) {
    failure = std::current_exception();
  }
  link.agree(failure);

  try {
    detail::aligned_buffer staging;
    // Each rank reads its shard's slices; a layout held whole by every rank (stage 0) is one shard,
    // which every rank reads (and re-hashes) whole.
    for (const detail::manifest_file& f : files) {
      load_state(fs, folder, f, tiers, io, staging, layout.shard_of(link.rank()), layout.options().world_size);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  link.agree(failure);
  return m.meta;
}

}  // namespace

checkpoint_meta load_checkpoint(const std::filesystem::path& root, const std::string& tag, tier_manager& tiers,
                                state_io& io, checkpoint_fs& fs,
                                const std::function<void(const checkpoint_meta&)>& accept) {
  detail::rank_link alone;
  return load_on(alone, root, tag, tiers, io, fs, accept);
}

checkpoint_meta load_checkpoint(const std::filesystem::path& root, const std::string& tag, tier_manager& tiers,
                                state_io& io, const checkpoint_ranks& ranks, checkpoint_fs& fs,
                                const std::function<void(const checkpoint_meta&)>& accept) {
  detail::rank_link link(ranks.comm, ranks.dev, detail::piece_bytes);
  return load_on(link, root, tag, tiers, io, fs, accept);
}

}  // namespace zoe::engine
