#include "initial_states.hpp"

#include <algorithm>
#include <vector>

#include "support/host_buffer.hpp"
#include "support/uniform_fill.hpp"
#include "zoe/engine/swap/state_io.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::bench {
namespace {

struct value_range {
  float lo = 0;
  float hi = 0;
};

value_range range_of(engine::state_kind s) {
  switch (s) {
    case engine::state_kind::gradient: return {-1e-2f, 1e-2f};
    case engine::state_kind::exp_avg: return {-1e-3f, 1e-3f};
    case engine::state_kind::exp_avg_sq: return {1e-8f, 1e-6f};
    case engine::state_kind::working:
    case engine::state_kind::master: break;
  }
  return {-1.0f, 1.0f};
}

}  // namespace

std::uint64_t write_initial_states(engine::engine_resources& resources, device& dev) {
  const engine::model_layout& layout = resources.layout();
  std::uint64_t largest = 0;
  for (const auto& p : layout.parameters()) {
    for (const engine::state_kind s : engine::all_states) largest = std::max(largest, engine::state_bytes(p, s));
  }
  // Staged in pinned memory: O_DIRECT writes and device copies take it at full speed.
  const host_buffer staging(largest);
  std::vector<float> values;
  engine::state_io io(resources.tiers(), dev, &resources.movers());
  std::uint64_t written = 0;
  for (const auto& p : layout.parameters()) {
    for (const engine::state_kind s : engine::all_states) {
      const std::uint64_t bytes = engine::state_bytes(p, s);
      if (bytes == 0) continue;  // the working copy of an fp32 parameter: the master is it
      values.assign(p.shard_numel, 0.0f);
      const value_range r = range_of(s);
      // A salt per (parameter, state), so no two states hold the same values.
      uniform_fill(std::span(values).first(p.real_numel(0)), r.lo, r.hi,
                   (std::uint64_t{p.id} << 3) + static_cast<unsigned>(s));
      const std::span<std::byte> data = staging.span().first(bytes);
      kernels::cast(kernels::const_tensor_view{kernels::dtype::fp32, values.data(), p.shard_numel},
                    kernels::tensor_view{engine::state_dtype(p, s), data.data(), p.shard_numel});
      io.write(p.id, s, data);
      written += bytes;
    }
  }
  return written;
}

}  // namespace zoe::bench
