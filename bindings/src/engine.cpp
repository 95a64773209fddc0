// The engine handle: created from a configuration (JSON text or a file), a model and a device;
// every parameter given its initial value one at a time, so host memory holds one parameter.
#include <algorithm>
#include <cerrno>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "engine_inputs.hpp"
#include "host_comm.hpp"
#include "initializer.hpp"
#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/config/parse.hpp"

namespace zoe::bindings {

engine::parameter_id layout_id(const zoe_engine& e, zoe_parameter_id parameter) {
  if (parameter >= e.layout_ids.size()) {
    throw usage_error(
        str("parameter ", parameter, " is not a parameter of this engine (it has ", e.layout_ids.size(), ")"));
  }
  return e.layout_ids[parameter];
}

std::vector<engine::module_spec> module_specs(const zoe_model& model) {
  std::vector<engine::module_spec> specs;
  specs.reserve(model.modules.size());
  for (const zoe_model::module& m : model.modules) {
    engine::module_spec& spec = specs.emplace_back(engine::module_spec{.name = m.name, .parameters = {}});
    for (const zoe_parameter_id p : m.parameters) {
      const zoe_model::parameter& param = model.parameters[p];
      spec.parameters.push_back({.name = param.name,
                                 .shape = param.shape,
                                 .dtype = param.dtype,
                                 .frozen = param.frozen,
                                 .group = param.group});
    }
  }
  return specs;
}

namespace {

// The engine's parameter id of each zoe_parameter_id (the engine counts parameters module by module).
std::vector<engine::parameter_id> layout_ids_of(const zoe_model& model) {
  std::vector<engine::parameter_id> ids(model.parameters.size(), 0);
  engine::parameter_id next = 0;
  for (const zoe_model::module& m : model.modules) {
    for (const zoe_parameter_id p : m.parameters) ids[p] = next++;
  }
  return ids;
}

// The modules with parameters, every one frozen: a backward fetch of one hands in no gradients.
std::vector<bool> frozen_modules(const zoe_model& model) {
  std::vector<bool> out;
  for (const zoe_model::module& m : model.modules) {
    out.push_back(!m.parameters.empty() && std::all_of(m.parameters.begin(), m.parameters.end(),
                                                       [&](zoe_parameter_id p) { return model.parameters[p].frozen; }));
  }
  return out;
}

std::vector<std::string> module_names(const zoe_model& model) {
  std::vector<std::string> names;
  for (const zoe_model::module& m : model.modules) names.push_back(m.name);
  return names;
}

std::vector<std::size_t> parameter_counts(const zoe_model& model) {
  std::vector<std::size_t> counts;
  for (const zoe_model::module& m : model.modules) counts.push_back(m.parameters.size());
  return counts;
}

std::string file_text(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw config_error(str(path, ": cannot read the configuration file: ", errno_text(err)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw config_error(str(path, ": cannot read the configuration file"));
  return text.str();
}

}  // namespace

engine::loaded_config load_config(const zoe_engine_desc& d) {
  // config_overrides only where the caller's struct has the field.
  const char* overrides =
      d.struct_size >= ZOE_FIELDS_END(zoe_engine_desc, config_overrides) ? d.config_overrides : nullptr;
  if ((d.config_json == nullptr) == (d.config_path == nullptr)) {
    throw usage_error(str("zoe_engine_desc: give exactly one of config_json and config_path (",
                          d.config_json == nullptr ? "neither is" : "both are", " set; \"{}\" gives the defaults)"));
  }
  // Both log their warnings (unknown keys, deprecated names) through zoe's log.
  if (overrides == nullptr) {
    return d.config_json != nullptr ? engine::parse_config(d.config_json) : engine::load_config_file(d.config_path);
  }
  const std::string text = d.config_json != nullptr ? std::string(d.config_json) : file_text(d.config_path);
  const std::string origin = d.config_json != nullptr ? std::string("<config>") : std::string(d.config_path);
  return engine::parse_config_with_overrides(text, origin, overrides, "zoe_engine_desc.config_overrides");
}

namespace {

// Every world of the engine (the caller's for zoe_all_reduce_sum and, over the host's collectives,
// the engine's two): the configuration's backend, nodes and timeout, and the host's collectives.
engine::comm_options world_options(const engine::engine_config& config,
                                   std::shared_ptr<engine::host_collectives> host) {
  engine::comm_options o = engine::comm_options_of(config);
  o.host = std::move(host);
  return o;
}

// The engine's own two worlds over the host's collectives; null without them (the engine makes
// its worlds from the configuration).
std::unique_ptr<engine::communicator> host_world(device& dev, const engine::engine_config& config,
                                                 const std::shared_ptr<engine::host_collectives>& host) {
  return host == nullptr ? nullptr : engine::make_communicator(dev, world_options(config, host));
}

engine::engine_options engine_options_of(const zoe_engine& e) {
  engine::engine_options o;
  o.comm = e.host_comm.get();
  o.gradient_comm = e.host_gradient_comm.get();
  return o;
}

// The device zoe.device names (kind and budget). Left at its default, the kind is core's empty
// one, so ZOE_DEVICE in the environment still chooses, as zoe_device_create's ZOE_DEVICE_AUTO does.
std::unique_ptr<zoe_device> open_configured_device(const engine::loaded_config& loaded) {
  device_options o{
      .kind = loaded.config.zoe.device_kind, .budget_bytes = loaded.config.zoe.device_budget, .cuda_ordinal = 0};
  const auto entry = std::find_if(loaded.entries.begin(), loaded.entries.end(),
                                  [](const engine::config_entry& e) { return e.key == "zoe.device.kind"; });
  if (entry != loaded.entries.end() && entry->source == engine::config_source::default_value) o.kind.clear();
  auto made = std::make_unique<zoe_device>();
  made->dev = select_device(o).dev;
  return made;
}

// Each parameter's value, one at a time: the caller's data as it is, or one parameter's worth of
// the seeded initializer.
void set_initial_values(const zoe_model& model, zoe_engine& e) {
  std::vector<float> values;
  for (std::size_t p = 0; p < model.parameters.size(); ++p) {
    const zoe_model::parameter& param = model.parameters[p];
    if (param.init == ZOE_INIT_DATA) {
      e.engine->set_parameter(e.layout_ids[p], std::span<const float>(param.data, param.numel));
      continue;
    }
    values.resize(param.numel);
    fill_initial(param.init, param.scale, param.seed, 0, values);
    e.engine->set_parameter(e.layout_ids[p], values);
  }
}

// Before an engine is destroyed: the work queued on the caller's streams completes (it may still
// read a fetched module), then the fetches still open are released (the caller may stop in the
// middle of a micro-batch, after an error of its own). The releases' own work needs no second wait
// here: offload_engine's destructor synchronizes the device before it frees anything. Failures are
// logged: the engine goes all the same.
void wind_down(zoe_engine& e) noexcept {
  try {
    e.device->dev->synchronize();
  } catch (const std::exception& failure) {
    log::warn("zoe_engine_destroy: the device's work failed: ", failure.what());
  }
  try {
    for (const std::uint32_t m : e.tracker.fetched_modules()) e.engine->release(m);
  } catch (const std::exception& failure) {
    log::warn("zoe_engine_destroy: releasing the modules still fetched: ", failure.what());
  }
}

}  // namespace
}  // namespace zoe::bindings

zoe_engine::zoe_engine(zoe_device& on, std::unique_ptr<zoe_device> owned, const zoe_model& model,
                       const zoe::engine::engine_config& config, std::shared_ptr<zoe::engine::host_collectives> host)
    : owned_device(std::move(owned)),
      device(&on),
      caller_world(zoe::engine::make_communicator(*on.dev, zoe::bindings::world_options(config, host))),
      host_comm(zoe::bindings::host_world(*on.dev, config, host)),
      host_gradient_comm(zoe::bindings::host_world(*on.dev, config, host)),
      caller_stream(on.dev->create_stream()),
      engine(std::make_unique<zoe::engine::offload_engine>(zoe::bindings::module_specs(model), config, *on.dev,
                                                           zoe::bindings::engine_options_of(*this))),
      layout_ids(zoe::bindings::layout_ids_of(model)),
      tracker(zoe::bindings::module_names(model), zoe::bindings::parameter_counts(model),
              zoe::bindings::frozen_modules(model)) {}

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_engine_create(const zoe_engine_desc* desc, zoe_engine** engine) {
  return guarded("zoe_engine_create", [&] {
    const zoe_engine_desc& d =
        zoe::bindings::expect_struct(desc, ZOE_FIELDS_END(zoe_engine_desc, device), "zoe_engine_desc");
    expect_pointer(engine, "engine (the out-parameter)");
    const zoe_model& model = live(d.model, "zoe_engine_desc.model");
    // The caller's device counts this engine as a user from now on, not once it is built: a
    // zoe_device_destroy meanwhile is refused instead of freeing the device under the build.
    std::optional<zoe::bindings::device_use> use;
    if (d.device != nullptr) use.emplace(d.device, "zoe_engine_desc.device");
    zoe_device* given = use ? &use->device() : nullptr;
    // host_comm only where the caller's struct has the field.
    const zoe_host_comm* host_comm =
        d.struct_size >= ZOE_FIELDS_END(zoe_engine_desc, host_comm) ? d.host_comm : nullptr;
    std::shared_ptr<zoe::engine::host_collectives> host =
        host_comm != nullptr ? zoe::bindings::host_collectives_of(host_comm) : nullptr;
    const zoe::engine::loaded_config loaded = zoe::bindings::load_config(d);
    std::unique_ptr<zoe_device> owned = given == nullptr ? zoe::bindings::open_configured_device(loaded) : nullptr;
    zoe_device& on = given != nullptr ? *given : *owned;
    auto made = std::make_unique<zoe_engine>(on, std::move(owned), model, loaded.config, std::move(host));
    zoe::bindings::set_initial_values(model, *made);
    if (made->owned_device != nullptr) {
      made->owned_device->owner = made.get();
      zoe::bindings::device_handles().add(made->owned_device.get());
    }
    try {
      *engine = zoe::bindings::adopt(std::move(made));
      if (use) use->keep();
    } catch (...) {
      if (d.device == nullptr) zoe::bindings::device_handles().remove(&on);
      throw;
    }
  });
}

zoe_status zoe_engine_destroy(zoe_engine* engine) {
  return guarded("zoe_engine_destroy", [&] {
    const zoe_engine& e = live(engine, "engine");
    if (zoe_device* const owned = e.owned_device.get(); owned != nullptr) {
      // Checked and unregistered under the device registry's lock, as zoe_device_destroy does: a
      // stream being made on the device counted itself first, or finds the device gone.
      (void)zoe::bindings::device_handles().remove_checked(owned, [owned] {
        if (const std::size_t users = owned->users.load(); users > 0) {
          throw zoe::usage_error(zoe::str("the engine's device ", static_cast<const void*>(owned),
                                          " (zoe_engine_device) still has ", users,
                                          " streams or calls in progress: destroy them first"));
        }
      });
    }
    std::unique_ptr<zoe_engine> gone = zoe::bindings::retire(engine, "engine");
    zoe_device* on = gone->device;
    const bool owned = gone->owned_device != nullptr;
    zoe::bindings::wind_down(*gone);
    gone.reset();  // waits for the engine's threads, removes its swap files, closes an owned device
    if (!owned) --on->users;
  });
}

zoe_status zoe_engine_device(zoe_engine* engine, zoe_device** device) {
  return guarded("zoe_engine_device", [&] {
    zoe_engine& e = live(engine, "engine");
    expect_pointer(device, "device (the out-parameter)");
    *device = e.device;
  });
}

zoe_status zoe_engine_batch_sizes(const zoe_engine* engine, zoe_batch_sizes* sizes) {
  return guarded("zoe_engine_batch_sizes", [&] {
    const zoe_engine& e = live(engine, "engine");
    zoe::bindings::expect_struct(sizes, ZOE_FIELDS_END(zoe_batch_sizes, gradient_accumulation_steps),
                                 "zoe_batch_sizes");
    const zoe::engine::engine_config& config = e.engine->config();
    sizes->train_batch_size = config.batch.train_batch_size.value_or(0);
    sizes->train_micro_batch_size_per_gpu = config.batch.train_micro_batch_size_per_gpu.value_or(0);
    sizes->gradient_accumulation_steps = config.gradient_accumulation_steps;
  });
}

}  // extern "C"
