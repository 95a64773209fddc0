#pragma once
// An offload_engine on its own host device and scratch folder, with a small model whose states sit
// on the tiers a test names, and a training micro-batch with real fetches and gradients handed in
// through zoe's buffers: what the engine suites (engine, measure_stages, statistics) drive.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/engine.hpp"

namespace zoe::testing {

/// Two modules of two parameters of odd sizes (padding differs), of working type `t`.
[[nodiscard]] std::vector<engine::module_spec> small_model(kernels::dtype t);

/// Stage 3, every state where `where` says ("device", "host", "nvme" or "split": a third of each
/// state's bytes on each tier), small aio blocks so shards span several chunks.
[[nodiscard]] engine::engine_config config_on(const std::string& where, const std::filesystem::path& nvme);

/// An engine on its own host device and scratch folder, every parameter given a seeded value.
struct rig {
  explicit rig(const std::string& where, kernels::dtype t = kernels::dtype::fp32,
               const std::function<void(engine::engine_config&)>& tweak = {},
               std::shared_ptr<fault_plan> faults = nullptr);

  /// One micro-batch: a forward over the modules and a backward in reverse, handing in `grads`
  /// (fp32 values per parameter, real elements) multiplied by the loss scale, cast to the working type.
  void micro_batch(const std::vector<std::vector<float>>& grads);

  /// State `k` of every parameter, in layout order.
  [[nodiscard]] std::vector<std::vector<float>> state(engine::state_kind k);

  scratch_dir dir;
  std::unique_ptr<device> dev;
  std::unique_ptr<engine::offload_engine> e;
};

/// One micro-batch of `e` on `dev` (rig::micro_batch's): a forward over the modules, a backward in
/// reverse handing in `grads` (fp32 values per parameter, real elements) multiplied by the loss
/// scale and cast to the working type. `before_reduce`, when given, runs after each module's
/// gradients are written and before they are handed in (a rank dying mid-step in the mpi tests).
/// `hands_in`, when given, says which modules backward reaches: one it refuses gets no gradient in
/// this micro-batch (as a module outside the micro-batch's graph).
void run_micro_batch(engine::offload_engine& e, device& dev, const std::vector<std::vector<float>>& grads,
                     const std::function<void(engine::module_id)>& before_reduce = {},
                     const std::function<bool(engine::module_id)>& hands_in = {});

/// Gradients of the whole model from `seed`, of scale `scale`.
[[nodiscard]] std::vector<std::vector<float>> gradients(const engine::model_layout& layout, std::uint64_t seed,
                                                        float scale = 1);

}  // namespace zoe::testing
