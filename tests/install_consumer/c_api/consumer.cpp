// A C++ program that uses zoe through its C API (zoe/zoe.h, libzoe_c.so) rather than the C++
// libraries, as a framework that wants one stable ABI would: the header must compile as C++ (its
// extern "C" block, its INIT macros), and handles fit std::unique_ptr. It checks what a C++ caller
// relies on: the library is the version the CMake package says, calls out of order and null
// handles fail with ZOE_ERROR_USAGE and a message, one step runs, and the statistics are JSON.
#include <zoe/zoe.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Throws naming the call, its status and zoe_last_error().
void check(zoe_status status, std::string_view call) {
  if (status != ZOE_SUCCESS) {
    throw std::runtime_error(std::string(call) + ": " + zoe_status_string(status) + ": " + zoe_last_error());
  }
}

void expect(bool condition, const std::string& what) {
  if (!condition) {
    throw std::runtime_error(what);
  }
}

// Destroys a handle; a failed destroy cannot throw from a destructor, so it is reported.
template <typename T, zoe_status (*destroy)(T*)>
struct destroyer {
  void operator()(T* handle) const {
    if (destroy(handle) != ZOE_SUCCESS) {
      std::fprintf(stderr, "c++ consumer: destroy: %s\n", zoe_last_error());
    }
  }
};
using device_ptr = std::unique_ptr<zoe_device, destroyer<zoe_device, zoe_device_destroy>>;
using stream_ptr = std::unique_ptr<zoe_stream, destroyer<zoe_stream, zoe_stream_destroy>>;
using model_ptr = std::unique_ptr<zoe_model, destroyer<zoe_model, zoe_model_destroy>>;
using engine_ptr = std::unique_ptr<zoe_engine, destroyer<zoe_engine, zoe_engine_destroy>>;

std::string statistics(zoe_engine* engine) {
  std::size_t length = 0;
  check(zoe_statistics(engine, nullptr, 0, &length), "zoe_statistics (length)");
  std::string json(length + 1, '\0');
  check(zoe_statistics(engine, json.data(), json.size(), &length), "zoe_statistics");
  json.resize(length);
  return json;
}

void run() {
  expect(std::string_view(zoe_version()) == ZOE_EXPECTED_VERSION,
         std::string("libzoe_c.so is version ") + zoe_version() + ", the CMake package " + ZOE_EXPECTED_VERSION);
  expect(zoe_engine_destroy(nullptr) == ZOE_ERROR_USAGE && *zoe_last_error() != '\0',
         "zoe_engine_destroy(NULL) is not ZOE_ERROR_USAGE with a message");

  zoe_device_options options = ZOE_DEVICE_OPTIONS_INIT;
  options.kind = ZOE_DEVICE_HOST;
  options.budget_bytes = std::uint64_t{64} << 20;
  zoe_device* raw_device = nullptr;
  check(zoe_device_create(&options, &raw_device), "zoe_device_create");
  const device_ptr device(raw_device);
  zoe_stream* raw_stream = nullptr;
  check(zoe_stream_create(device.get(), &raw_stream), "zoe_stream_create");
  const stream_ptr stream(raw_stream);

  zoe_model* raw_model = nullptr;
  check(zoe_model_create(&raw_model), "zoe_model_create");
  const model_ptr model(raw_model);
  zoe_module_id layer = 0;
  check(zoe_model_add_module(model.get(), "layer0", &layer), "zoe_model_add_module");
  const std::vector<std::uint64_t> shape{16};
  const std::vector<float> initial(16, 0.25f);
  zoe_parameter_desc bias = ZOE_PARAMETER_DESC_INIT;
  bias.name = "layer0.bias";
  bias.ndim = shape.size();
  bias.shape = shape.data();
  bias.init = ZOE_INIT_DATA;
  bias.data = initial.data();
  zoe_parameter_id bias_id = 0;
  check(zoe_model_add_parameter(model.get(), layer, &bias, &bias_id), "zoe_model_add_parameter");

  zoe_engine_desc desc = ZOE_ENGINE_DESC_INIT;
  desc.config_json = R"({"zero_optimization": {"stage": 3}})";
  desc.model = model.get();
  desc.device = device.get();
  zoe_engine* raw_engine = nullptr;
  check(zoe_engine_create(&desc, &raw_engine), "zoe_engine_create");
  // Declared after the stream and device, so destroyed before them.
  const engine_ptr engine(raw_engine);

  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  expect(zoe_step(engine.get(), 1e-3, &result) == ZOE_ERROR_USAGE && *zoe_last_error() != '\0',
         "zoe_step before any micro-batch is not ZOE_ERROR_USAGE with a message");

  check(zoe_begin_micro_batch(engine.get()), "zoe_begin_micro_batch");
  check(zoe_fetch(engine.get(), layer, ZOE_PASS_BACKWARD, stream.get()), "zoe_fetch");
  void* gradient = nullptr;
  check(zoe_module_gradients(engine.get(), layer, stream.get(), &gradient, 1), "zoe_module_gradients");
  check(zoe_stream_synchronize(stream.get()), "zoe_stream_synchronize");
  // The host device's memory is host memory; the buffer holds 16 fp32 values.
  std::vector<float> ones(16, 1.0f);
  std::copy(ones.begin(), ones.end(), static_cast<float*>(gradient));
  check(zoe_reduce_gradients(engine.get(), layer, stream.get()), "zoe_reduce_gradients");
  check(zoe_release(engine.get(), layer, stream.get()), "zoe_release");
  check(zoe_end_micro_batch(engine.get()), "zoe_end_micro_batch");
  check(zoe_step(engine.get(), 1e-3, &result), "zoe_step");
  expect(result.skipped == 0 && result.optimizer_steps == 1, "the step did not count as one optimizer step");

  const std::string json = statistics(engine.get());
  expect(json.size() > 2 && json.front() == '{' && json.back() == '}', "zoe_statistics is not a JSON object: " + json);
  std::printf("zoe C++ consumer of the C API (zoe %s): usage errors, one step, %zu bytes of statistics: OK\n",
              zoe_version(), json.size());
}

}  // namespace

int main() {
  try {
    run();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c++ consumer: %s\n", e.what());
    return 1;
  }
}
