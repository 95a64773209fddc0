// TEMPORARY stand-in for engine/src/swap/state_io.cpp (being written on main): removed at the merge.
#include <cstring>

#include "zoe/core/check.hpp"
#include "zoe/engine/swap/state_io.hpp"
#include "zoe/io/swap_channel.hpp"

namespace zoe::engine {

struct state_io::impl {
  tier_manager& tiers;
  device& dev;
  io::swap_store* store;

  void move(parameter_id p, state_kind s, std::span<std::byte> host, move_kind kind) {
    const state_location& loc = tiers.location(p, s);
    ZOE_EXPECTS(host.size() == loc.bytes, "size");
    ZOE_EXPECTS(tiers.begin_move(p, s, kind), "in flight");
    try {
      switch (loc.where) {
        case tier::device: {
          const device_stream st = dev.create_stream();
          if (kind == move_kind::read) {
            dev.copy_async(host.data(), loc.device, host.size(), copy_kind::device_to_host, st.view());
          } else {
            dev.copy_async(loc.device, host.data(), host.size(), copy_kind::host_to_device, st.view());
          }
          dev.synchronize(st.view());
          break;
        }
        case tier::host:
          if (kind == move_kind::read) {
            std::memcpy(host.data(), loc.host.data(), host.size());
          } else {
            std::memcpy(loc.host.data(), host.data(), host.size());
          }
          break;
        case tier::nvme: {
          io::swap_channel ch(*store);
          const io::swap_request r{kind == move_kind::read ? io::io_op::read : io::io_op::write, loc.extent, 0, host, 0};
          ch.run(std::span(&r, 1));
          break;
        }
      }
    } catch (...) {
      tiers.abort_move(p, s);
      throw;
    }
    tiers.finish_move(p, s);
  }
};

state_io::state_io(tier_manager& tiers, device& dev, allocators::pinned_host_resource& /*pinned*/,
                   io::swap_store* store, std::size_t /*staging_bytes*/)
    : impl_(std::make_unique<impl>(impl{tiers, dev, store})) {}
state_io::~state_io() = default;

void state_io::read(parameter_id p, state_kind s, std::span<std::byte> out) { impl_->move(p, s, out, move_kind::read); }
void state_io::write(parameter_id p, state_kind s, std::span<const std::byte> data) {
  impl_->move(p, s, {const_cast<std::byte*>(data.data()), data.size()}, move_kind::write);  // NOLINT
}

}  // namespace zoe::engine
