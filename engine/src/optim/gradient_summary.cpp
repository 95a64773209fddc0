// The step's gradient summary (gradient_path.hpp): each parameter's sum of squares and overflow,
// gathered once the last micro-batch is accumulated, and their total in layout order.
#include "gradient_path_impl.hpp"

#include <cstring>
#include <vector>

namespace zoe::engine {

gradient_summary gradient_path::impl::summarize() {
  if (scratch != nullptr) {
    std::vector<std::byte> host(scratch_bytes);
    dev.copy_async(host.data(), scratch, scratch_bytes, copy_kind::device_to_host, stream.view());
    dev.synchronize(stream.view());
    for (const parameter_layout& p : tiers.layout().parameters()) {
      if (p.frozen || home(p.id).where != tier::device) continue;
      std::uint32_t flag = 0;
      std::memcpy(&sums[p.id], host.data() + slots[p.id].result, sizeof(double));
      std::memcpy(&flag, host.data() + slots[p.id].flag, sizeof(flag));
      overflows[p.id] = flag != 0 ? 1 : 0;
    }
  }
  gradient_summary out;
  for (const parameter_layout& p : tiers.layout().parameters()) {
    out.sum_of_squares += sums[p.id];
    out.overflow = out.overflow || overflows[p.id] != 0;
  }
  return out;
}

}  // namespace zoe::engine
