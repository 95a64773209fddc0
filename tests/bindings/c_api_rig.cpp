// The C API test rig (c_api_rig.hpp).
#include "c_api_rig.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

namespace zoe::testing {
namespace {

std::uint16_t to_bf16(float v) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x7FFFU + ((bits >> 16) & 1U);  // round to nearest even (the values are finite)
  return static_cast<std::uint16_t>(bits >> 16);
}

std::filesystem::path make_dir() {
  std::string name = (std::filesystem::temp_directory_path() / "zoe-c-api-XXXXXX").string();
  if (mkdtemp(name.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << name << " failed";
  return name;
}

}  // namespace

float bf16_rounded(float v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(to_bf16(v)) << 16;
  float out = 0;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

std::string c_rig::config(const c_rig_options& o, const std::filesystem::path& dir) {
  std::string offload;
  if (o.placement == "cpu") {
    offload = R"(, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"})";
  } else if (o.placement == "nvme") {
    offload =
        R"(, "offload_param": {"device": "nvme", "nvme_path": ")" + dir.string() +
        R"(", "buffer_count": 2, "buffer_size": 65536, "max_in_cpu": 0}, "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
        dir.string() + R"("})";
  }
  if (o.stage < 3 && !offload.empty()) offload = R"(, "offload_optimizer": {"device": "cpu"})";
  return R"({"zero_optimization": {"stage": )" + std::to_string(o.stage) +
         R"(, "sub_group_size": 3000, "stage3_param_persistence_threshold": 0)" + offload +
         R"(}, "aio": {"block_size": 16384}, "gradient_clipping": 0,
            "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
            "zoe": {"comm": {"timeout_s": 60}}})";
}

zoe_model* make_model(const std::vector<c_module>& modules) {
  zoe_model* model = nullptr;
  EXPECT_EQ(zoe_model_create(&model), ZOE_SUCCESS);
  std::uint64_t parameters = 0;
  for (const c_module& m : modules) {
    zoe_module_id id = 0;
    EXPECT_EQ(zoe_model_add_module(model, m.name.c_str(), &id), ZOE_SUCCESS) << zoe_last_error();
    for (const c_parameter& p : m.parameters) {
      zoe_parameter_desc desc = ZOE_PARAMETER_DESC_INIT;
      desc.name = p.name.c_str();
      desc.ndim = p.shape.size();
      desc.shape = p.shape.data();
      desc.dtype = p.dtype;
      desc.init = ZOE_INIT_UNIFORM;
      desc.scale = 0.5F;
      desc.seed = ++parameters;
      desc.frozen = p.frozen;
      desc.group = p.group;
      zoe_parameter_id pid = 0;
      EXPECT_EQ(zoe_model_add_parameter(model, id, &desc, &pid), ZOE_SUCCESS) << zoe_last_error();
    }
  }
  return model;
}

std::vector<unsigned char> checkpoint_client(zoe_engine* e) {
  std::size_t length = 1;  // a call that leaves it unset gives a byte too many
  EXPECT_EQ(zoe_checkpoint_client(e, nullptr, 0, &length), ZOE_SUCCESS) << zoe_last_error();
  std::vector<unsigned char> out(length);
  EXPECT_EQ(zoe_checkpoint_client(e, out.data(), out.size(), &length), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(length, out.size());
  return out;
}

// The model's ids are given in order: module m is the m-th, parameter p the p-th over the modules.
c_rig::c_rig(const std::vector<c_module>& modules, const c_rig_options& options) : dir_(make_dir()) {
  zoe_device_options d = ZOE_DEVICE_OPTIONS_INIT;
  d.kind = ZOE_DEVICE_HOST;
  d.budget_bytes = std::uint64_t{256} << 20;
  EXPECT_EQ(zoe_device_create(&d, &device_), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(zoe_stream_create(device_, &stream_), ZOE_SUCCESS) << zoe_last_error();
  zoe_model* model = make_model(modules);
  for (const c_module& m : modules) {
    modules_.emplace_back();
    for (const c_parameter& p : m.parameters) {
      modules_.back().push_back(static_cast<zoe_parameter_id>(dtypes_.size()));
      dtypes_.push_back(p.dtype);
      frozen_.push_back(p.frozen);
    }
  }
  const std::string json = config(options, dir_);
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  e.config_json = json.c_str();
  e.config_overrides = options.overrides.empty() ? nullptr : options.overrides.c_str();
  e.model = model;
  e.device = device_;
  const zoe_status made = zoe_engine_create(&e, &engine_);
  zoe_model_destroy(model);
  if (made != ZOE_SUCCESS) {
    ADD_FAILURE() << "zoe_engine_create: " << zoe_last_error();
    engine_ = nullptr;
  }
}

c_rig::~c_rig() {
  if (engine_ != nullptr) {
    EXPECT_EQ(zoe_engine_destroy(engine_), ZOE_SUCCESS) << zoe_last_error();
  }
  if (stream_ != nullptr) zoe_stream_destroy(stream_);
  if (device_ != nullptr) zoe_device_destroy(device_);
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::uint64_t c_rig::numel(zoe_parameter_id p) const {
  std::uint64_t n = 0;
  EXPECT_EQ(zoe_parameter_numel(engine_, p, &n), ZOE_SUCCESS) << zoe_last_error();
  return n;
}

std::vector<float> c_rig::read(zoe_parameter_id p, zoe_state s) const {
  std::vector<float> out(numel(p));
  const zoe_status st = zoe_read_state(engine_, p, s, out.data(), out.size());
  EXPECT_EQ(st, ZOE_SUCCESS) << zoe_last_error();
  if (st != ZOE_SUCCESS) out.clear();
  return out;
}

std::vector<std::vector<float>> c_rig::values(std::uint64_t seed, float scale) const {
  std::vector<std::vector<float>> out;
  for (std::size_t p = 0; p < dtypes_.size(); ++p) {
    std::mt19937 gen(static_cast<std::uint32_t>(seed * 1009 + p));
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(numel(static_cast<zoe_parameter_id>(p)));
    for (float& x : v) x = d(gen);
    out.push_back(std::move(v));
  }
  return out;
}

void c_rig::forward() const {
  ASSERT_EQ(zoe_begin_micro_batch(engine_), ZOE_SUCCESS) << zoe_last_error();
  for (zoe_module_id m = 0; m < modules_.size(); ++m) {
    ASSERT_EQ(zoe_fetch(engine_, m, ZOE_PASS_FORWARD, stream_), ZOE_SUCCESS) << zoe_last_error();
    ASSERT_EQ(zoe_release(engine_, m, stream_), ZOE_SUCCESS) << zoe_last_error();
  }
}

zoe_status c_rig::hand_in(zoe_module_id m, const std::vector<std::vector<float>>& grads) const {
  std::vector<void*> buffers(modules_[m].size());
  const zoe_status st = zoe_module_gradients(engine_, m, stream_, buffers.data(), buffers.size());
  if (st != ZOE_SUCCESS) return st;
  EXPECT_EQ(zoe_stream_synchronize(stream_), ZOE_SUCCESS);  // the host device: the buffers are host memory
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const zoe_parameter_id p = modules_[m][i];
    if (frozen_[p] != 0) {
      EXPECT_EQ(buffers[i], nullptr) << "parameter " << p << " is frozen";
      continue;
    }
    const std::vector<float>& g = grads[p];
    if (dtypes_[p] == ZOE_FP32) {
      std::memcpy(buffers[i], g.data(), g.size() * sizeof(float));
      continue;
    }
    if (dtypes_[p] != ZOE_BF16) {
      ADD_FAILURE() << "parameter " << p << ": the rig writes fp32 and bf16 gradients";
      continue;
    }
    for (std::size_t k = 0; k < g.size(); ++k) static_cast<std::uint16_t*>(buffers[i])[k] = to_bf16(g[k]);
  }
  return st;
}

void c_rig::micro_batch(const std::vector<std::vector<float>>& grads) const {
  forward();
  backward(grads);
}

void c_rig::backward(const std::vector<std::vector<float>>& grads) const {
  for (zoe_module_id m = static_cast<zoe_module_id>(modules_.size()); m-- > 0;) {
    ASSERT_EQ(zoe_fetch(engine_, m, ZOE_PASS_BACKWARD, stream_), ZOE_SUCCESS) << zoe_last_error();
    bool trainable = false;
    for (const zoe_parameter_id p : modules_[m]) trainable = trainable || frozen_[p] == 0;
    if (trainable) {
      ASSERT_EQ(hand_in(m, grads), ZOE_SUCCESS) << zoe_last_error();
      ASSERT_EQ(zoe_reduce_gradients(engine_, m, stream_), ZOE_SUCCESS) << zoe_last_error();
    }
    ASSERT_EQ(zoe_release(engine_, m, stream_), ZOE_SUCCESS) << zoe_last_error();
  }
  ASSERT_EQ(zoe_end_micro_batch(engine_), ZOE_SUCCESS) << zoe_last_error();
}

zoe_step_result c_rig::step(double lr) const {
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  EXPECT_EQ(zoe_step(engine_, lr, &result), ZOE_SUCCESS) << zoe_last_error();
  return result;
}

}  // namespace zoe::testing
