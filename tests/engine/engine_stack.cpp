#include "engine_stack.hpp"

#include <cstring>
#include <random>

#include "zoe/core/str.hpp"
#include "zoe/engine/swap/state_io.hpp"

namespace zoe::testing {

engine::engine_config nvme_config(std::uint64_t buffer_count, std::uint64_t buffer_elements) {
  engine::engine_config c;
  c.zero.stage = 3;
  engine::offload_param_config op;
  op.device = engine::offload_device::nvme;
  op.nvme_path = "/nonexistent";  // engine_stack points it at its scratch folder
  op.buffer_count = buffer_count;
  op.buffer_size = buffer_elements;
  op.max_in_cpu = 0;
  c.zero.offload_param = op;
  c.aio.block_size = 16 * 1024;
  c.aio.queue_depth = 8;
  return c;
}

std::vector<engine::module_spec> layered_model(std::size_t count, std::size_t per_module, std::uint64_t numel,
                                               std::vector<kernels::dtype> types) {
  std::vector<engine::module_spec> out;
  std::size_t k = 0;
  for (std::size_t m = 0; m < count; ++m) {
    engine::module_spec spec{str("layer", m), {}};
    for (std::size_t i = 0; i < per_module; ++i, ++k) {
      // Shapes differ by a few elements, so the padding of each shard differs.
      spec.parameters.push_back({str("layer", m, ".w", i), {numel + 7 * k}, types[k % types.size()]});
    }
    out.push_back(std::move(spec));
  }
  return out;
}

engine_stack::engine_stack(stack_options options) {
  engine::engine_config& config = options.config;
  if (config.zero.offload_param && config.zero.offload_param->device == engine::offload_device::nvme) {
    config.zero.offload_param->nvme_path = dir_.path();
  }
  if (config.zero.offload_optimizer && config.zero.offload_optimizer->device == engine::offload_device::nvme) {
    config.zero.offload_optimizer->nvme_path = dir_.path();
  }
  dev_ = make_host_device(options.device_budget);
  if (options.use_fake_device) {
    auto fake = std::make_unique<fake_device>(std::move(dev_));
    fake_ = fake.get();
    dev_ = std::move(fake);
  }
  engine::engine_resources_options po{.arena_bytes = options.arena_bytes, .wrap_backend = {}};
  if (options.faults) {
    po.wrap_backend = [faults = options.faults](std::unique_ptr<io::io_backend> inner) {
      return std::unique_ptr<io::io_backend>(std::make_unique<fault_injecting_backend>(std::move(inner), faults));
    };
  }
  path_ = std::make_unique<engine::engine_resources>(std::move(options.modules), config, *dev_, std::move(po));
}

engine_stack::~engine_stack() = default;

std::uint64_t engine_stack::shard_bytes(engine::parameter_id p) const {
  const engine::parameter_layout& param = layout().parameter(p);
  return engine::state_bytes(param, engine::working_state(param));
}

std::vector<std::byte> engine_stack::shard_data(engine::parameter_id p, std::uint64_t seed) const {
  const engine::parameter_layout& param = layout().parameter(p);
  std::vector<std::byte> data(shard_bytes(p), std::byte{0});
  const std::size_t real = param.real_numel(0) * kernels::dtype_size(param.dtype);
  const std::vector<std::byte> r = random_bytes(real, seed);
  std::memcpy(data.data(), r.data(), real);
  return data;
}

void engine_stack::to_device(void* dst, std::span<const std::byte> data) {
  const device_stream s = dev_->create_stream();
  dev_->copy_async(dst, data.data(), data.size(), copy_kind::host_to_device, s.view());
  dev_->synchronize(s.view());
}

std::vector<std::byte> engine_stack::from_device(const void* src, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  const device_stream s = dev_->create_stream();
  dev_->copy_async(out.data(), src, bytes, copy_kind::device_to_host, s.view());
  dev_->synchronize(s.view());
  return out;
}

void engine_stack::write_home(engine::parameter_id p, std::span<const std::byte> data) {
  engine::state_io io(tiers(), *dev_, &movers());
  io.write(p, engine::working_state(layout().parameter(p)), data);
}

std::vector<std::byte> engine_stack::read_home(engine::parameter_id p) {
  const std::size_t bytes = shard_bytes(p);
  void* d = dev_->allocate(bytes);
  std::vector<std::byte> out;
  try {
    const engine::swap_ticket t = swapper().swap_in(p, d);
    t.wait_ready();
    t.synchronize();
    out = from_device(d, bytes);
  } catch (...) {
    dev_->deallocate(d, bytes);
    throw;
  }
  dev_->deallocate(d, bytes);
  return out;
}

}  // namespace zoe::testing
