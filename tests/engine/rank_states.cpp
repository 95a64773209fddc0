#include "rank_states.hpp"

#include <algorithm>
#include <cstring>

#include "swap_store_support.hpp"
#include "tiers_test_support.hpp"
#include "zoe/core/str.hpp"

namespace zoe::testing {

namespace {

bool saved(const engine::parameter_layout& p, engine::state_kind s) {
  return s != engine::state_kind::gradient && engine::state_bytes(p, s) > 0;
}

std::size_t element_bytes(const engine::parameter_layout& p, engine::state_kind s) {
  return kernels::dtype_size(engine::state_dtype(p, s));
}

engine::engine_config config_for(rank_tier where, const std::filesystem::path& swap) {
  const engine::offload_device d =
      where == rank_tier::nvme ? engine::offload_device::nvme : engine::offload_device::cpu;
  engine::engine_config c = offload_config(d, d, swap);
  c.aio.block_size = 16 * 1024;
  return c;
}

}  // namespace

std::vector<engine::module_spec> uneven_model() {
  using kernels::dtype;
  return {
      {.name = "embed", .parameters = {{.name = "embed.w", .shape = {4097, 3}, .dtype = dtype::fp16}}},
      {.name = "block",
       .parameters = {{.name = "block.w", .shape = {70, 130}, .dtype = dtype::fp16},
                      {.name = "block.b", .shape = {7}, .dtype = dtype::fp16},
                      {.name = "block.scale", .shape = {}, .dtype = dtype::fp16},
                      {.name = "block.norm", .shape = {3001}, .dtype = dtype::fp32}}},
  };
}

model_values random_model(const engine::model_layout& layout, std::uint64_t seed) {
  model_values out;
  for (const engine::parameter_layout& p : layout.parameters()) {
    for (const engine::state_kind s : engine::all_states) {
      if (!saved(p, s)) continue;
      out[{p.id, s}] = random_bytes(p.numel * element_bytes(p, s), seed * 7919 + p.id * 31 + static_cast<unsigned>(s));
    }
  }
  return out;
}

rank_states::rank_states(std::vector<engine::module_spec> modules, std::size_t world_size, std::size_t rank,
                         rank_tier where, std::shared_ptr<fault_plan> faults)
    : rank_(rank),
      config_(config_for(where, swap_.path())),
      layout_(std::move(modules), {.world_size = world_size}),
      where_(layout_, config_),
      plan_(engine::make_footprint_plan(layout_, config_, where_)),
      dev_(make_host_device()) {
  pinned_ = std::make_unique<allocators::pinned_host_resource>(
      *dev_, allocators::pinned_options{.limit_bytes = std::max<std::uint64_t>(plan_.pinned_bytes, 1)});
  if (plan_.nvme_bytes > 0) {
    io::swap_store_options so = store_options(plan_.swap_paths, plan_.nvme_bytes);
    if (faults) {
      so.wrap_backend = [faults](std::unique_ptr<io::io_backend> inner) {
        return std::unique_ptr<io::io_backend>(std::make_unique<fault_injecting_backend>(std::move(inner), faults));
      };
    }
    store_ = std::make_unique<io::swap_store>(std::move(so));
  }
  tiers_ = std::make_unique<engine::tier_manager>(
      layout_, where_, plan_, engine::tier_resources{.dev = *dev_, .pinned = *pinned_, .store = store_.get()});
  movers_ = std::make_unique<engine::mover>(store_.get(), nullptr, dev_.get(), engine::mover_options{});
  io_ = std::make_unique<engine::state_io>(*tiers_, *dev_, movers_.get());
}

rank_states::~rank_states() = default;

std::vector<std::byte> rank_states::shard_of(const model_values& values, const engine::parameter_layout& p,
                                             engine::state_kind s) const {
  std::vector<std::byte> shard(engine::state_bytes(p, s), std::byte{0});
  const std::size_t e = element_bytes(p, s);
  const std::vector<std::byte>& whole = values.at({p.id, s});
  const std::size_t real = p.real_numel(rank_) * e;
  if (real > 0) std::memcpy(shard.data(), whole.data() + rank_ * p.shard_numel * e, real);
  return shard;
}

void rank_states::give(const model_values& values) {
  for (const engine::parameter_layout& p : layout_.parameters()) {
    for (const engine::state_kind s : engine::all_states) {
      if (saved(p, s)) io_->write(p.id, s, shard_of(values, p, s));
    }
  }
}

::testing::AssertionResult rank_states::holds(const model_values& values) {
  for (const engine::parameter_layout& p : layout_.parameters()) {
    for (const engine::state_kind s : engine::all_states) {
      if (!saved(p, s)) continue;
      std::vector<std::byte> got(engine::state_bytes(p, s));
      io_->read(p.id, s, got);
      const ::testing::AssertionResult same = same_bytes(got, shard_of(values, p, s));
      if (!same) {
        return ::testing::AssertionFailure() << "rank " << rank_ << ", parameter '" << p.name << "', state "
                                             << engine::state_kind_name(s) << ": " << same.message();
      }
    }
  }
  return ::testing::AssertionSuccess();
}

engine::checkpoint_meta checkpoint_meta_of(int n) {
  engine::checkpoint_meta m;
  m.scaler = {.scale = 1024.0 * n, .cur_iter = 10 + n, .optimizer_steps = 9 + n};
  m.lr = 0.1 / 3.0 * n;
  return m;
}

}  // namespace zoe::testing
