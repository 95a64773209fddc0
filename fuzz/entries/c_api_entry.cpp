// run_c_api: a model, a configuration and a sequence of C API calls, all chosen by the bytes.
//
// Input format: the first bytes choose the model (modules, parameters, shapes, dtypes,
// initializers), the configuration (stage, where parameters and optimizer states live, fp16 or
// bf16, micro-batches per step, clipping, activation shares) and the device budget; every byte
// after them is a call (op below) followed by its arguments. Sizes stay small (the budget at most
// 256 MiB, a parameter at most 4096 elements, an activation at most 64 KiB of a buffer the entry
// owns), so each input runs in milliseconds, and the arguments zoe cannot check (pointers, a
// pointer's size) are always true ones.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "c_api_checks.hpp"
#include "c_api_entry.hpp"
#include "fuzz_input.hpp"
#include "scratch_folder.hpp"
#include "zoe/core/str.hpp"

namespace zoe::fuzz {
namespace {

using json = nlohmann::ordered_json;

constexpr std::size_t max_calls = 200;
constexpr std::size_t activation_buffer_bytes = 64 << 10;
constexpr std::uint64_t max_numel = 4096;

struct parameter {
  std::uint32_t module = 0;
  std::uint64_t numel = 1;
  zoe_dtype dtype = ZOE_FP32;
};

std::size_t dtype_bytes(zoe_dtype t) { return t == ZOE_FP32 ? 4 : 2; }

/// One input's objects: the model, the device, its stream, the engine (destroyed and made again
/// by the calls), the checkpoint and swap folders.
class session {
 public:
  explicit session(fuzz_input& in) : in_(in) {
    must_succeed(zoe_model_create(&model_), "zoe_model_create");
    choose_model();
    config_ = choose_config();
    zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
    o.kind = ZOE_DEVICE_HOST;
    o.budget_bytes = std::uint64_t{1} << (20 + in_.below(9));
    must_succeed(zoe_device_create(&o, &device_), "zoe_device_create");
    must_succeed(zoe_stream_create(device_, &stream_), "zoe_stream_create");
    if (!succeeded(zoe_device_allocate(device_, activation_buffer_bytes, stream_, &activations_),
                   "zoe_device_allocate")) {
      activations_ = nullptr;
    }
  }

  /// Destroys what is left, checking that every destroy succeeds: no engine is left, and the
  /// device's memory and stream are given back before the device.
  void close() {
    if (engine_live_) must_succeed(zoe_engine_destroy(engine_), "zoe_engine_destroy");
    engine_live_ = false;
    if (activations_ != nullptr) {
      must_succeed(zoe_device_free(device_, activations_, activation_buffer_bytes, stream_), "zoe_device_free");
    }
    activations_ = nullptr;
    must_succeed(zoe_stream_destroy(std::exchange(stream_, nullptr)), "zoe_stream_destroy");
    must_succeed(zoe_device_destroy(std::exchange(device_, nullptr)), "zoe_device_destroy");
    must_succeed(zoe_model_destroy(std::exchange(model_, nullptr)), "zoe_model_destroy");
  }

  /// After a failure (an exception on its way out): frees what close() did not reach, unchecked.
  ~session() {
    if (engine_live_) zoe_engine_destroy(engine_);
    if (activations_ != nullptr) zoe_device_free(device_, activations_, activation_buffer_bytes, stream_);
    if (stream_ != nullptr) zoe_stream_destroy(stream_);
    if (device_ != nullptr) zoe_device_destroy(device_);
    if (model_ != nullptr) zoe_model_destroy(model_);
  }
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  /// Makes the engine; false when zoe refuses the configuration or the model.
  bool create_engine() {
    zoe_engine_desc desc = ZOE_ENGINE_DESC_INIT;
    desc.config_json = config_.c_str();
    desc.model = model_;
    desc.device = device_;
    engine_live_ = succeeded(zoe_engine_create(&desc, &engine_), "zoe_engine_create");
    return engine_live_;
  }

  /// Runs calls until the input ends; true when an optimizer step succeeded.
  bool run_calls() {
    bool stepped = false;
    for (std::size_t i = 0; i < max_calls && !in_.empty(); ++i) stepped |= call(in_.below(18));
    return stepped;
  }

 private:
  void choose_model() {
    const std::uint32_t modules = 1 + in_.below(3);
    for (std::uint32_t m = 0; m < modules; ++m) {
      zoe_module_id id = 0;
      must_succeed(zoe_model_add_module(model_, str("m", m).c_str(), &id), "zoe_model_add_module");
      module_sizes_.push_back(0);
      const std::uint32_t count = in_.below(3);  // a module without parameters is allowed
      for (std::uint32_t k = 0; k < count; ++k) add_parameter(id, str("m", m, ".p", k));  // unique in the model
    }
  }

  void add_parameter(zoe_module_id module, const std::string& name) {
    std::vector<std::uint64_t> shape(in_.below(3));
    std::uint64_t numel = 1;
    for (std::uint64_t& extent : shape) {
      extent = 1 + in_.below(static_cast<std::uint32_t>(max_numel / numel));
      numel *= extent;
    }
    zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
    d.name = name.c_str();
    d.ndim = shape.size();
    d.shape = shape.data();
    d.dtype = static_cast<zoe_dtype>(in_.below(3));
    d.init = static_cast<zoe_init>(1 + in_.below(3));
    d.scale = static_cast<float>(in_.byte()) / 64.0F;
    d.seed = in_.byte();
    zoe_parameter_id id = 0;
    must_succeed(zoe_model_add_parameter(model_, module, &d, &id), "zoe_model_add_parameter");
    parameters_.push_back({module, numel, d.dtype});
    ++module_sizes_[module];
  }

  std::string choose_config() {
    static constexpr std::array<const char*, 3> homes = {"none", "cpu", "nvme"};
    const std::string swap = (scratch_.path() / "swap").string();
    std::filesystem::create_directories(swap);
    json zero = {{"stage", in_.below(4)},
                 {"sub_group_size", 1024 << in_.below(4)},
                 {"reduce_bucket_size", 4096},
                 {"allgather_bucket_size", 4096},
                 {"stage3_prefetch_bucket_size", 4096},
                 {"stage3_param_persistence_threshold", in_.below(2) * 100}};
    // Always written, "none" too: an fp32 parameter's working copy is its master, which the
    // optimizer's NVMe puts there, and offload_param's default buffer_size (1e8 elements) would
    // then size the parameter swap buffers: 1.86 GiB pinned for any model, half a second an input.
    zero["offload_param"] = {{"device", homes[in_.below(3)]},
                             {"nvme_path", swap},
                             {"buffer_count", 2 + in_.below(3)},
                             {"buffer_size", 65536},
                             {"max_in_cpu", 0}};
    const char* optimizer_home = homes[in_.below(3)];
    // Below stage 3 (where DeepSpeed refuses NVMe) offload_param is ignored, and its defaults apply.
    if (optimizer_home == homes[2] && zero["stage"] != 3) optimizer_home = homes[1];
    if (optimizer_home != homes[0]) zero["offload_optimizer"] = {{"device", optimizer_home}, {"nvme_path", swap}};
    json j = {{"zero_optimization", zero},
              {"aio", {{"block_size", 65536}}},
              {"gradient_accumulation_steps", 1 + in_.below(3)},
              {"gradient_clipping", in_.below(2)},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}}},
              {"zoe",
               {{"device", {{"kind", "host"}}},
                {"activations", {{"host_bytes", 4096 * in_.below(4)}, {"prefetch_bytes", 4096 * in_.below(4)}}}}}};
    if (in_.below(2) == 1) j["zoe"]["activations"]["nvme_bytes"] = 262144;
    switch (in_.below(3)) {
      case 1: j["fp16"] = {{"enabled", true}, {"initial_scale_power", in_.below(17)}}; break;
      case 2: j["bf16"] = {{"enabled", true}}; break;
      default: break;
    }
    return j.dump();
  }

  zoe_module_id module_arg() { return in_.below(static_cast<std::uint32_t>(module_sizes_.size()) + 1); }
  zoe_parameter_id parameter_arg() { return in_.below(static_cast<std::uint32_t>(parameters_.size()) + 1); }

  /// A count that is right most of the time and off by one otherwise.
  std::size_t count_arg(std::size_t right) {
    switch (in_.below(4)) {
      case 0: return right + 1;
      case 1: return right == 0 ? 0 : right - 1;
      default: return right;
    }
  }

  const char* tag_arg() {
    static constexpr std::array<const char*, 6> tags = {nullptr, "a", "b", "../escape", ".hidden", "latest"};
    return tags[in_.below(tags.size())];
  }

  std::string checkpoint_root() const { return (scratch_.path() / "checkpoints").string(); }

  /// Writes the gradient buffers of module `m` with a pattern from the input (inf and NaN among
  /// its fp16 and bf16 values, so steps get skipped too).
  void write_gradients(zoe_module_id m, const std::vector<void*>& buffers) {
    must_succeed(zoe_stream_synchronize(stream_), "zoe_stream_synchronize");
    const std::span<const std::uint8_t> pattern = in_.take(8);
    std::size_t k = 0;
    for (const parameter& p : parameters_) {
      if (p.module != m) continue;
      auto* bytes = static_cast<std::uint8_t*>(buffers[k++]);
      const std::size_t n = p.numel * dtype_bytes(p.dtype);
      for (std::size_t i = 0; i < n && !pattern.empty(); ++i) bytes[i] = pattern[i % pattern.size()];
    }
  }

  /// Call `op` (0 to 17); true when it was a successful step.
  bool call(std::uint32_t op) {
    switch (op) {
      case 0: succeeded(zoe_begin_micro_batch(engine_), "zoe_begin_micro_batch"); return false;
      case 1: succeeded(zoe_end_micro_batch(engine_), "zoe_end_micro_batch"); return false;
      case 2: {
        const zoe_module_id m = module_arg();
        const std::uint32_t pass = in_.below(3);  // 2: no zoe_pass (never held in a zoe_pass object: UB in C++)
        if (succeeded(zoe_fetch(engine_, m, static_cast<zoe_pass>(pass), stream_), "zoe_fetch")) held_.insert(m);
        return false;
      }
      case 3: {
        const zoe_module_id m = module_arg();
        if (succeeded(zoe_release(engine_, m, stream_), "zoe_release")) held_.erase(m);
        return false;
      }
      case 4: {
        const zoe_module_id m = module_arg();
        const std::size_t right = m < module_sizes_.size() ? module_sizes_[m] : 0;
        std::vector<void*> buffers(count_arg(right) + 1);
        if (succeeded(zoe_module_gradients(engine_, m, stream_, buffers.data(), buffers.size() - 1),
                      "zoe_module_gradients")) {
          if (buffers.size() - 1 != right) throw invariant_failure("zoe_module_gradients took a wrong count");
          write_gradients(m, buffers);
        }
        return false;
      }
      case 5: succeeded(zoe_reduce_gradients(engine_, module_arg(), stream_), "zoe_reduce_gradients"); return false;
      case 6: {
        static constexpr std::array<double, 6> rates = {
            0.0, 1e-3, 0.1, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()};
        zoe_step_result result = ZOE_STEP_RESULT_INIT;
        return succeeded(zoe_step(engine_, rates[in_.below(rates.size())], &result), "zoe_step");
      }
      case 7: {
        const char* tag = tag_arg();
        succeeded(zoe_checkpoint_save(engine_, checkpoint_root().c_str(), tag), "zoe_checkpoint_save");
        return false;
      }
      case 8: {
        const char* tag = tag_arg();
        succeeded(zoe_checkpoint_load(engine_, checkpoint_root().c_str(), tag), "zoe_checkpoint_load");
        return false;
      }
      case 9: activation_calls(); return false;
      case 10: read_calls(); return false;
      case 11: {
        // The figures change between two calls (times, bandwidths), so the length asked first may
        // be short by the second: a short capacity only sets the length, as documented; ask again.
        std::size_t length = 0;
        if (!succeeded(zoe_statistics(engine_, nullptr, 0, &length), "zoe_statistics")) return false;
        std::string text;
        while (text.size() <= length) {
          text.assign(length + 1, '\0');
          must_succeed(zoe_statistics(engine_, text.data(), text.size(), &length), "zoe_statistics");
        }
        if (!json::accept(text.c_str())) throw invariant_failure("zoe_statistics wrote no JSON: " + text);
        return false;
      }
      case 12: {
        double scale = 0;
        if (succeeded(zoe_loss_scale(engine_, &scale), "zoe_loss_scale") && !(scale > 0)) {
          throw invariant_failure(str("zoe_loss_scale gave ", scale));
        }
        return false;
      }
      case 13: {
        zoe_stage_times times = ZOE_STAGE_TIMES_INIT;
        succeeded(zoe_measure_stages(engine_, &times), "zoe_measure_stages");
        return false;
      }
      case 14: {
        std::array<double, 3> values = {1.0, -2.0, 0.5};
        succeeded(zoe_all_reduce_sum(engine_, values.data(), in_.below(4)), "zoe_all_reduce_sum");
        zoe_ranks ranks = ZOE_RANKS_INIT;
        succeeded(zoe_engine_ranks(engine_, &ranks), "zoe_engine_ranks");
        zoe_comm_traffic traffic = ZOE_COMM_TRAFFIC_INIT;
        succeeded(zoe_engine_traffic(engine_, &traffic), "zoe_engine_traffic");
        return false;
      }
      case 15:
        // The handle stays in hand after the destroy: every later call must refuse it (or, once
        // an engine is made again, reach that one).
        if (engine_live_) {
          must_succeed(zoe_engine_destroy(engine_), "zoe_engine_destroy");
          engine_live_ = false;
        } else {
          create_engine();
        }
        held_.clear();
        return false;
      case 16: {
        std::uint64_t current = 0, peak = 0, budget = 0;
        must_succeed(zoe_device_memory(device_, &current, &peak, &budget), "zoe_device_memory");
        if (current > peak || peak > budget) {
          throw invariant_failure(str("device memory ", current, " now, ", peak, " at most, over the budget ", budget));
        }
        return false;
      }
      default: succeeded(zoe_stream_synchronize(stream_), "zoe_stream_synchronize"); return false;  // 17
    }
  }

  void activation_calls() {
    switch (in_.below(3)) {
      case 0: {
        if (activations_ == nullptr) return;
        const std::size_t bytes = 1 + in_.below(activation_buffer_bytes);
        zoe_activation_id id = 0;
        if (succeeded(zoe_activation_save(engine_, activations_, bytes, stream_, &id), "zoe_activation_save")) {
          saved_.push_back(id);
        }
        return;
      }
      case 1: {
        void* pointer = nullptr;
        succeeded(zoe_activation_load(engine_, activation_arg(), stream_, &pointer), "zoe_activation_load");
        return;
      }
      default: succeeded(zoe_activation_free(engine_, activation_arg(), stream_), "zoe_activation_free"); return;
    }
  }

  /// One saved id most of the time, else one never handed out.
  zoe_activation_id activation_arg() {
    const std::uint32_t pick = in_.below(static_cast<std::uint32_t>(saved_.size()) + 1);
    return pick < saved_.size() ? saved_[pick] : 1000 + in_.byte();
  }

  void read_calls() {
    const zoe_parameter_id p = parameter_arg();
    const std::uint64_t numel = p < parameters_.size() ? parameters_[p].numel : 1;
    if (in_.below(2) == 0) {
      std::vector<float> values(count_arg(numel) + 1);
      succeeded(zoe_read_state(engine_, p, static_cast<zoe_state>(in_.below(5)), values.data(), values.size() - 1),
                "zoe_read_state");
      return;
    }
    void* address = nullptr;
    if (succeeded(zoe_parameter_address(engine_, p, &address), "zoe_parameter_address")) {
      if (p >= parameters_.size()) throw invariant_failure(str("zoe_parameter_address took parameter ", p));
      // The whole value must be readable (ASan checks the copy) once the stream's work is done.
      must_succeed(zoe_stream_synchronize(stream_), "zoe_stream_synchronize");
      std::vector<std::uint8_t> copy(numel * dtype_bytes(parameters_[p].dtype));
      std::memcpy(copy.data(), address, copy.size());
    }
  }

  fuzz_input& in_;
  scratch_folder scratch_;
  zoe_model* model_ = nullptr;
  zoe_device* device_ = nullptr;
  zoe_stream* stream_ = nullptr;
  zoe_engine* engine_ = nullptr;
  bool engine_live_ = false;
  void* activations_ = nullptr;
  std::string config_;
  std::vector<std::uint32_t> module_sizes_;
  std::vector<parameter> parameters_;
  std::vector<zoe_activation_id> saved_;
  std::set<zoe_module_id> held_;  // fetched and not released
};

}  // namespace

outcome run_c_api(std::span<const std::uint8_t> bytes) {
  fuzz_input in(bytes);
  session s(in);
  const bool stepped = s.create_engine() && s.run_calls();
  s.close();
  return stepped ? outcome::accepted : outcome::refused;
}

}  // namespace zoe::fuzz
