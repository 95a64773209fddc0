#pragma once
// A small engine made through zoe.h alone, for the C API's model tests (frozen parameters, groups,
// zoe_write_state, checkpoint client data, inference fetches): modules of parameters as a test
// names them, on the host device, stage and placement chosen per test, and one training
// micro-batch driven through the calls a program makes.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "zoe/zoe.h"

namespace zoe::testing {

struct c_parameter {
  std::string name;
  std::vector<std::uint64_t> shape;
  zoe_dtype dtype = ZOE_FP32;
  int frozen = 0;
  std::uint32_t group = 0;
};

struct c_module {
  std::string name;
  std::vector<c_parameter> parameters;
};

/// Where the states live: "device" (nothing offloaded), "cpu" (parameters and optimizer states
/// in pinned host memory), "nvme" (both on NVMe in the rig's folder).
struct c_rig_options {
  std::string placement = "device";
  int stage = 3;
  /// Merged over the configuration (zoe_engine_desc.config_overrides), or empty.
  std::string overrides;
};

/// Builds the model (every parameter initialized uniform from its id) and the engine; a failure
/// is a fatal test failure. The rig's folder (NVMe swap, checkpoints) is removed with it.
class c_rig {
 public:
  c_rig(const std::vector<c_module>& modules, const c_rig_options& options);
  ~c_rig();
  c_rig(const c_rig&) = delete;
  c_rig& operator=(const c_rig&) = delete;

  /// The model's JSON configuration for `options` (also what zoe_footprint_plan reads).
  [[nodiscard]] static std::string config(const c_rig_options& options, const std::filesystem::path& dir);

  /// zoe_read_state of the whole value (a failure is a test failure, and an empty vector).
  [[nodiscard]] std::vector<float> read(zoe_parameter_id p, zoe_state s) const;
  /// One micro-batch: forward(), then backward(grads).
  void micro_batch(const std::vector<std::vector<float>>& grads) const;
  /// Backward over the modules in reverse, each trainable one's gradients handed in (hand_in) and
  /// reduced, then zoe_end_micro_batch.
  void backward(const std::vector<std::vector<float>>& grads) const;
  /// zoe_begin_micro_batch, then every module fetched for forward and released, in order.
  void forward() const;
  /// zoe_module_gradients of module `m` (fetched for backward), each trainable parameter's buffer
  /// filled with `grads[p]` (fp32, numel values per parameter, rounded to the working dtype) and a
  /// frozen one's expected NULL; the status of zoe_module_gradients (nothing filled unless success).
  zoe_status hand_in(zoe_module_id m, const std::vector<std::vector<float>>& grads) const;
  /// zoe_step at `lr` (a failure is a test failure).
  zoe_step_result step(double lr) const;
  /// Deterministic values for every parameter (numel each) from `seed`, of magnitude `scale`.
  [[nodiscard]] std::vector<std::vector<float>> values(std::uint64_t seed, float scale) const;

  [[nodiscard]] std::uint64_t numel(zoe_parameter_id p) const;
  [[nodiscard]] zoe_engine* engine() const { return engine_; }
  [[nodiscard]] zoe_stream* stream() const { return stream_; }
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }
  [[nodiscard]] std::size_t parameter_count() const { return dtypes_.size(); }
  [[nodiscard]] zoe_dtype dtype(zoe_parameter_id p) const { return dtypes_[p]; }

 private:
  std::filesystem::path dir_;
  zoe_device* device_ = nullptr;
  zoe_stream* stream_ = nullptr;
  zoe_engine* engine_ = nullptr;
  std::vector<std::vector<zoe_parameter_id>> modules_;  ///< parameter ids per module
  std::vector<zoe_dtype> dtypes_;
  std::vector<int> frozen_;
};

/// The model of `modules` (the caller destroys it): each parameter's desc as the test names it,
/// initialized uniform (scale 0.5) from its id; a failure is a test failure.
[[nodiscard]] zoe_model* make_model(const std::vector<c_module>& modules);

/// The client bytes of the checkpoint `e` last loaded (zoe_checkpoint_client; a failure is a test
/// failure).
[[nodiscard]] std::vector<unsigned char> checkpoint_client(zoe_engine* e);

/// `v` rounded to bf16 (nearest even) and widened again.
[[nodiscard]] float bf16_rounded(float v);

}  // namespace zoe::testing
