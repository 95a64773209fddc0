// The engine rig (engine_rig.hpp).
#include "engine_rig.hpp"

#include <random>
#include <utility>

#include "zoe/kernels/cast.hpp"

namespace zoe::testing {

using engine::module_id;
using engine::state_kind;

std::vector<engine::module_spec> small_model(kernels::dtype t) {
  return {{"layer0", {{"layer0.w", {37, 53}, t}, {"layer0.b", {53}, t}}},
          {"layer1", {{"layer1.w", {53, 29}, t}, {"layer1.b", {29}, t}}}};
}

engine::engine_config config_on(const std::string& where, const std::filesystem::path& nvme) {
  engine::engine_config c;
  c.zero.stage = 3;
  c.aio.block_size = 16 * 1024;
  c.zero.sub_group_size = 3000;
  c.zoe.extra_swap_paths = {nvme};
  c.gradient_clipping = 0;
  c.optimizer = engine::optimizer_config{};
  c.optimizer->weight_decay = 0.01;
  engine::offload_optimizer_config oo;
  oo.device = engine::offload_device::nvme;
  oo.nvme_path = nvme;
  oo.pipeline_read = true;
  oo.pipeline_write = true;
  c.zero.offload_optimizer = oo;
  // Few, small parameter swap buffers: DeepSpeed's defaults pin a gigabyte, which takes seconds.
  engine::offload_param_config op;
  op.buffer_count = 2;
  op.buffer_size = 64 * 1024;
  c.zero.offload_param = op;
  for (auto& p : c.zoe.placement) {
    if (where == "split") {
      p = engine::tier_fractions{.device = 1.0 / 3, .host = 1.0 / 3, .nvme = 1.0 / 3};
    } else {
      p = engine::tier_fractions{.device = where == "device" ? 1.0 : 0.0,
                                 .host = where == "host" ? 1.0 : 0.0,
                                 .nvme = where == "nvme" ? 1.0 : 0.0};
    }
  }
  return c;
}

rig::rig(const std::string& where, kernels::dtype t, const std::function<void(engine::engine_config&)>& tweak,
         std::shared_ptr<fault_plan> faults)
    : dev(make_host_device(std::uint64_t{256} << 20)) {
  engine::engine_config c = config_on(where, dir.path());
  if (tweak) tweak(c);
  engine::engine_options o;
  if (faults) {
    o.wrap_backend = [faults](std::unique_ptr<io::io_backend> inner) {
      return std::unique_ptr<io::io_backend>(std::make_unique<fault_injecting_backend>(std::move(inner), faults));
    };
  }
  e = std::make_unique<engine::offload_engine>(small_model(t), c, *dev, std::move(o));
  for (const engine::parameter_layout& p : e->layout().parameters()) {
    std::mt19937 gen(p.id + 1);
    std::normal_distribution<float> d(0, 0.5F);
    std::vector<float> v(p.numel);
    for (float& x : v) x = d(gen);
    e->set_parameter(p.id, v);
  }
}

void rig::micro_batch(const std::vector<std::vector<float>>& grads) { run_micro_batch(*e, *dev, grads); }

void run_micro_batch(engine::offload_engine& e, device& dev, const std::vector<std::vector<float>>& grads,
                     const std::function<void(module_id)>& before_reduce,
                     const std::function<bool(module_id)>& hands_in) {
  const device_stream s = dev.create_stream();
  e.begin_micro_batch();
  const auto modules = static_cast<module_id>(e.layout().modules().size());
  for (module_id m = 0; m < modules; ++m) {
    e.fetch(m).wait();
    e.release(m, s.view());
  }
  for (module_id m = modules; m-- > 0;) {
    if (hands_in && !hands_in(m)) continue;
    e.fetch(m).wait();
    const std::vector<void*> buffers = e.gradient_buffers(m, s.view());
    dev.synchronize(s.view());
    const engine::module_layout& ml = e.layout().module(m);
    // The copies read their sources in stream order: they live until the synchronize.
    std::vector<std::vector<std::byte>> sources;
    for (std::size_t i = 0; i < ml.parameters.size(); ++i) {
      const engine::parameter_layout& p = e.layout().parameter(ml.parameters[i]);
      std::vector<float> scaled(grads[p.id]);
      for (float& x : scaled) x = static_cast<float>(x * e.loss_scale());
      std::vector<std::byte>& cast = sources.emplace_back(p.numel * kernels::dtype_size(p.dtype));
      kernels::cast({kernels::dtype::fp32, scaled.data(), scaled.size()}, {p.dtype, cast.data(), p.numel});
      dev.copy_async(buffers[i], cast.data(), cast.size(), copy_kind::host_to_device, s.view());
    }
    dev.synchronize(s.view());
    if (before_reduce) before_reduce(m);
    e.reduce_gradients(m, s.view());
    e.release(m, s.view());
  }
  e.end_micro_batch();
}

std::vector<std::vector<float>> rig::state(state_kind k) {
  std::vector<std::vector<float>> out;
  for (const engine::parameter_layout& p : e->layout().parameters()) out.push_back(e->read_state(p.id, k));
  return out;
}

std::vector<std::vector<float>> gradients(const engine::model_layout& layout, std::uint64_t seed, float scale) {
  std::vector<std::vector<float>> out;
  for (const engine::parameter_layout& p : layout.parameters()) {
    std::mt19937 gen(static_cast<std::uint32_t>(seed * 131 + p.id));
    std::normal_distribution<float> d(0, scale);
    std::vector<float> g(p.numel);
    for (float& x : g) x = d(gen);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace zoe::testing
