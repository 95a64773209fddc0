// Stage 1's whole-gradient accumulation on each rank (local_accumulation.hpp).
#include "local_accumulation.hpp"

#include <algorithm>
#include <functional>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/stream_launch.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::engine::detail {

using kernels::dtype;

local_accumulation::local_accumulation(const tier_manager& tiers, std::size_t world_size, device& dev,
                                       allocators::buffer_pool* staging)
    : tiers_(tiers), world_(world_size), dev_(dev), staging_(staging) {
  const model_layout& layout = tiers.layout();
  const std::size_t n = layout.parameters().size();
  where_.assign(n, nullptr);
  on_device_.assign(n, false);
  held_.assign(layout.modules().size(), 0);
  // Offsets first (the plan's sizes: device blocks aligned to arena_alignment), then one
  // allocation per memory.
  std::vector<std::uint64_t> offset(n, 0);
  std::uint64_t host_elements = 0;
  for (const parameter_layout& p : layout.parameters()) {
    if (p.frozen) continue;  // takes no gradient
    const std::uint64_t elements = p.padded_numel(world_);
    if (tiers.location(p.id, state_kind::gradient).where == tier::device) {
      on_device_[p.id] = true;
      offset[p.id] = device_bytes_;
      device_bytes_ += align_up(elements * sizeof(float), arena_alignment);
    } else {
      offset[p.id] = host_elements;
      host_elements += elements;
    }
  }
  ZOE_EXPECTS(host_elements == 0 || staging_ != nullptr,
              "local_accumulation: gradients off the device need the gradient path's staging buffers");
  if (device_bytes_ > 0) {
    try {
      device_block_ = static_cast<std::byte*>(dev.allocate(device_bytes_));
    } catch (const memory_error& e) {
      throw memory_error(str("stage 1's local gradient accumulation (", device_bytes_,
                             " device bytes: zero_optimization.stage, gradient_accumulation_steps): ", e.what()));
    }
  }
  host_.assign(host_elements, 0.0F);
  for (const parameter_layout& p : layout.parameters()) {
    if (p.frozen) continue;
    where_[p.id] =
        on_device_[p.id] ? reinterpret_cast<float*>(device_block_ + offset[p.id]) : host_.data() + offset[p.id];
  }
  try {
    stream_ = dev.create_stream();
  } catch (...) {
    if (device_block_ != nullptr) dev.deallocate(device_block_, device_bytes_);
    throw;
  }
}

local_accumulation::~local_accumulation() {
  stream_ = device_stream{};
  if (device_block_ != nullptr) dev_.deallocate(device_block_, device_bytes_);
}

void local_accumulation::transfer(parameter_id p, void* source, bool overwrite, bool write_back, stream_view on) {
  const parameter_layout& prm = tiers_.layout().parameter(p);
  const std::size_t n = static_cast<std::size_t>(prm.padded_numel(world_));
  float* const acc = where_[p];
  if (on_device_[p]) {
    const kernels::const_tensor_view src{prm.dtype, source, n};
    const kernels::tensor_view dst{dtype::fp32, acc, n};
    const kernels::const_tensor_view sum{dtype::fp32, acc, n};
    const kernels::tensor_view back{prm.dtype, source, n};
    launch_kernel(
        dev_, on,
        [=] {
          if (write_back) {
            kernels::accumulate(src, {acc, n});
            kernels::cast(sum, back);
          } else if (overwrite) {
            kernels::cast(src, dst);
          } else {
            kernels::accumulate(src, {acc, n});
          }
        },
        [=](stream_view s) {
          if (write_back) {
            kernels::cuda::accumulate(src, {acc, n}, s);
            kernels::cuda::cast(sum, back, s);
          } else if (overwrite) {
            kernels::cuda::cast(src, dst, s);
          } else {
            kernels::cuda::accumulate(src, {acc, n}, s);
          }
        });
    return;
  }
  // Host memory, piece by piece through one staging buffer: off the device, added; with
  // write_back, the sum cast into the buffer and copied back onto the device.
  const std::size_t element = kernels::dtype_size(prm.dtype);
  const std::size_t piece = staging_->buffer_size() / sizeof(float);
  allocators::buffer_lease lease = staging_->acquire();
  auto* const bytes = static_cast<std::byte*>(source);
  for (std::size_t e = 0; e < n; e += piece) {
    const std::size_t len = std::min(piece, n - e);
    dev_.copy_async(lease.data(), bytes + e * element, len * element, copy_kind::device_to_host, on);
    dev_.synchronize(on);
    const kernels::const_tensor_view src{prm.dtype, lease.data(), len};
    if (overwrite) {
      kernels::cast(src, kernels::tensor_view{dtype::fp32, acc + e, len});
    } else {
      kernels::accumulate(src, {acc + e, len});
    }
    if (write_back) {
      kernels::cast(kernels::const_tensor_view{dtype::fp32, acc + e, len}, {prm.dtype, lease.data(), len});
      dev_.copy_async(bytes + e * element, lease.data(), len * element, copy_kind::host_to_device, on);
      dev_.synchronize(on);
    }
  }
}

void local_accumulation::add(module_id m, std::span<void* const> memory, stream_view stream) {
  const std::vector<parameter_id>& params = tiers_.layout().module(m).trainable;
  ZOE_ASSERT(memory.size() == params.size());
  const bool first = held_[m] == 0;
  for (std::size_t i = 0; i < params.size(); ++i) transfer(params[i], memory[i], first, false, stream);
  held_[m] = 1;
}

void local_accumulation::fold(module_id m, std::span<void* const> memory, stream_view stream) {
  if (held_[m] == 0) return;
  const std::vector<parameter_id>& params = tiers_.layout().module(m).trainable;
  ZOE_ASSERT(memory.size() == params.size());
  held_[m] = 0;
  for (std::size_t i = 0; i < params.size(); ++i) transfer(params[i], memory[i], false, true, stream);
}

std::vector<module_id> local_accumulation::held_modules() const {
  std::vector<module_id> out;
  for (std::size_t m = 0; m < held_.size(); ++m) {
    if (held_[m] != 0) out.push_back(static_cast<module_id>(m));
  }
  return out;
}

void local_accumulation::forget() noexcept { std::fill(held_.begin(), held_.end(), 0); }

}  // namespace zoe::engine::detail
