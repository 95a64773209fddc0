// Synchronous access to one state's home, for initialization, checkpoints and debugging reads.
#include "zoe/engine/swap/state_io.hpp"

#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/swap/carried_error.hpp"

namespace zoe::engine {
namespace {

std::string describe(const parameter_layout& p, state_kind s) {
  return str("the ", state_kind_name(s), " state of parameter '", p.name, "'");
}

}  // namespace

struct state_io::impl {
  impl(tier_manager& t, device& d, mover* m) : tiers(t), dev(d), movers(m), stream(d.create_stream()) {}

  tier_manager& tiers;
  device& dev;
  mover* movers;
  device_stream stream;

  // Checks the range and takes the state for the move; returns its home.
  const state_location& begin(parameter_id p, state_kind s, std::uint64_t offset, std::uint64_t bytes, move_kind kind);
  // Runs `move` on the taken state; finishes the move, or aborts it and rethrows the failure with
  // the state named.
  template <typename Move>
  void run(parameter_id p, state_kind s, Move&& move);
  // One piece through the mover, in the caller's memory, waited for: state_io is off the hot path,
  // but its pieces go first (demand) since the caller waits on them.
  void nvme(io::io_op op, const io::swap_extent& extent, std::uint64_t offset, std::span<std::byte> buffer,
            const std::string& what);
};

const state_location& state_io::impl::begin(parameter_id p, state_kind s, std::uint64_t offset, std::uint64_t bytes,
                                            move_kind kind) {
  const parameter_layout& param = tiers.layout().parameter(p);
  const state_location& home = tiers.location(p, s);
  ZOE_EXPECTS(offset <= home.bytes && bytes <= home.bytes - offset, "state_io: bytes [", offset, ", ", offset + bytes,
              ") pass the end of ", describe(param, s), " (", home.bytes, " bytes)");
  if (kind == move_kind::write && home.where == tier::nvme) {
    const std::uint64_t granule = movers->chunk_bytes();
    const std::uint64_t end = offset + bytes;
    ZOE_EXPECTS(offset % granule == 0 && (end % granule == 0 || end == home.bytes), "state_io: a write of bytes [",
                offset, ", ", end, ") of ", describe(param, s),
                " on nvme must start and end on a multiple of aio.block_size (", granule,
                " bytes) or end at the state's end");
  }
  // A read of a released state is refused by the tier manager, naming it.
  ZOE_EXPECTS(tiers.begin_move(p, s, kind), "state_io: cannot access ", describe(param, s),
              ": it is being moved by another part of the engine");
  return home;
}

template <typename Move>
void state_io::impl::run(parameter_id p, state_kind s, Move&& move) {
  try {
    move();
  } catch (...) {
    tiers.abort_move(p, s);
    carried_error failure = carried_error::of(std::current_exception());
    failure.message = str(describe(tiers.layout().parameter(p), s), ": ", failure.message);
    failure.raise();
  }
  tiers.finish_move(p, s);
}

void state_io::impl::nvme(io::io_op op, const io::swap_extent& extent, std::uint64_t offset,
                          std::span<std::byte> buffer, const std::string& what) {
  ZOE_ASSERT(movers != nullptr && movers->store() != nullptr);
  mover::piece piece;
  piece.priority = move_priority::demand;
  piece.buffer = buffer;
  piece.bytes = buffer.size();
  (op == io::io_op::read ? piece.read : piece.write) = mover::io_range{extent, offset};
  piece.what = what;
  movers->run(std::move(piece));
}

state_io::state_io(tier_manager& tiers, device& dev, mover* movers)
    : impl_(std::make_unique<impl>(tiers, dev, movers)) {}

state_io::~state_io() = default;

void state_io::read(parameter_id p, state_kind s, std::uint64_t offset, std::span<std::byte> out) {
  const state_location& home = impl_->begin(p, s, offset, out.size(), move_kind::read);
  impl_->run(p, s, [&] {
    if (out.empty()) return;
    switch (home.where) {
      case tier::device:
        impl_->dev.copy_async(out.data(), static_cast<const std::byte*>(home.device) + offset, out.size(),
                              copy_kind::device_to_host, impl_->stream.view());
        impl_->dev.synchronize(impl_->stream.view());
        break;
      case tier::host: std::memcpy(out.data(), home.host.data() + offset, out.size()); break;
      case tier::nvme:
        impl_->nvme(io::io_op::read, home.extent, offset, out, describe(impl_->tiers.layout().parameter(p), s));
        break;
    }
  });
}

void state_io::read(parameter_id p, state_kind s, std::span<std::byte> out) {
  const std::uint64_t bytes = impl_->tiers.location(p, s).bytes;
  ZOE_EXPECTS(out.size() == bytes, "state_io: reading ", describe(impl_->tiers.layout().parameter(p), s), " into ",
              out.size(), " bytes; it has ", bytes);
  read(p, s, 0, out);
}

void state_io::write(parameter_id p, state_kind s, std::uint64_t offset, std::span<const std::byte> data) {
  const state_location& home = impl_->begin(p, s, offset, data.size(), move_kind::write);
  impl_->run(p, s, [&] {
    if (data.empty()) return;
    switch (home.where) {
      case tier::device:
        impl_->dev.copy_async(static_cast<std::byte*>(home.device) + offset, data.data(), data.size(),
                              copy_kind::host_to_device, impl_->stream.view());
        impl_->dev.synchronize(impl_->stream.view());
        break;
      case tier::host: std::memcpy(home.host.data() + offset, data.data(), data.size()); break;
      case tier::nvme:
        // The channel only reads a write's buffer; swap_request holds a mutable span for both directions.
        impl_->nvme(
            io::io_op::write, home.extent, offset,
            {const_cast<std::byte*>(data.data()), data.size()},  // NOLINT(cppcoreguidelines-pro-type-const-cast)
            describe(impl_->tiers.layout().parameter(p), s));
        break;
    }
  });
}

void state_io::write(parameter_id p, state_kind s, std::span<const std::byte> data) {
  const std::uint64_t bytes = impl_->tiers.location(p, s).bytes;
  ZOE_EXPECTS(data.size() == bytes, "state_io: writing ", data.size(), " bytes to ",
              describe(impl_->tiers.layout().parameter(p), s), "; it has ", bytes);
  write(p, s, 0, data);
}

void state_io::write_shadow(parameter_id p, state_kind s, std::span<const std::byte> data) {
  const parameter_layout& param = impl_->tiers.layout().parameter(p);
  const io::swap_extent shadow = impl_->tiers.shadow(p, s);
  ZOE_EXPECTS(shadow.bytes > 0, "state_io: ", describe(param, s), " has no shadow extent (only NVMe states do)");
  ZOE_EXPECTS(data.size() == impl_->tiers.location(p, s).bytes, "state_io: writing ", data.size(),
              " bytes to the shadow of ", describe(param, s), "; it has ", impl_->tiers.location(p, s).bytes);
  // Taken as for a read: the home is left as it is, so a failed write needs no undo.
  ZOE_EXPECTS(impl_->tiers.begin_move(p, s, move_kind::read), "state_io: cannot access ", describe(param, s),
              ": it is being moved by another part of the engine");
  impl_->run(p, s, [&] {
    // The channel only reads a write's buffer; swap_request holds a mutable span for both directions.
    impl_->nvme(io::io_op::write, shadow, 0,
                {const_cast<std::byte*>(data.data()), data.size()},  // NOLINT(cppcoreguidelines-pro-type-const-cast)
                str("the shadow of ", describe(param, s)));
  });
}

std::uint64_t state_io::write_granule() const noexcept {
  return impl_->movers != nullptr ? impl_->movers->chunk_bytes() : 4096;
}

}  // namespace zoe::engine
