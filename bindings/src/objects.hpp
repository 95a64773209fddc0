#pragma once
// The objects behind the C API's opaque handles. zoe.h declares them as incomplete structs in the
// global namespace; they are defined here, once, for every source of the library, with the
// registry traits that name them in messages (devices and streams in device_objects.hpp).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device_objects.hpp"
#include "handles.hpp"
#include "micro_batch_tracker.hpp"
#include "zoe/engine/comm/host_collectives.hpp"
#include "zoe/engine/engine.hpp"
#include "zoe/kernels/dtype.hpp"
#include "zoe/zoe.h"

struct zoe_model {
  struct parameter {
    std::string name;
    std::vector<std::uint64_t> shape;
    zoe::kernels::dtype dtype = zoe::kernels::dtype::fp32;
    zoe_init init = ZOE_INIT_ZEROS;
    const float* data = nullptr;  ///< ZOE_INIT_DATA: the caller's, read by zoe_engine_create
    float scale = 0;
    std::uint64_t seed = 0;
    zoe_module_id module = 0;
    std::uint64_t numel = 1;
    bool frozen = false;      ///< zoe_parameter_desc.frozen
    std::uint32_t group = 0;  ///< zoe_parameter_desc.group
  };
  struct module {
    std::string name;
    std::vector<zoe_parameter_id> parameters;  ///< in the order added
  };
  std::vector<module> modules;
  std::vector<parameter> parameters;  ///< by zoe_parameter_id: in the order added, over all modules
};

struct zoe_engine {
  /// Builds the engine of `model` on `on` (`owned`: the device opened for it, or null); its worlds
  /// over `host` (zoe_engine_desc.host_comm) when given, else as zoe.comm.backend says.
  zoe_engine(zoe_device& on, std::unique_ptr<zoe_device> owned, const zoe_model& model,
             const zoe::engine::engine_config& config, std::shared_ptr<zoe::engine::host_collectives> host);

  /// The device opened for this engine when the caller gave none; declared before `engine`, which
  /// runs on it, so that it is closed after it.
  std::unique_ptr<zoe_device> owned_device;
  zoe_device* device = nullptr;
  /// The world zoe_all_reduce_sum runs on, the caller's alone (its collectives keep their own
  /// order, apart from the engine's), and the stream its copies go on. Made before `engine`: every
  /// rank makes its worlds in the same order.
  std::unique_ptr<zoe::engine::communicator> caller_world;
  /// The engine's two worlds (engine_options::comm / gradient_comm) when they run over the host's
  /// collectives; null otherwise (the engine makes its own from the configuration). Made after
  /// caller_world and before `engine`, which uses them, in this order on every rank.
  std::unique_ptr<zoe::engine::communicator> host_comm;
  std::unique_ptr<zoe::engine::communicator> host_gradient_comm;
  zoe::device_stream caller_stream;
  std::unique_ptr<zoe::engine::offload_engine> engine;
  /// The engine's parameter id (modules in order) of each zoe_parameter_id (the order added).
  std::vector<zoe::engine::parameter_id> layout_ids;
  zoe::bindings::micro_batch_tracker tracker;
};

namespace zoe::bindings {

template <>
struct handle_traits<zoe_model> {
  static constexpr std::string_view name = "zoe_model";
  static handle_set& set() { return model_handles(); }
};
template <>
struct handle_traits<zoe_engine> {
  static constexpr std::string_view name = "zoe_engine";
  static handle_set& set() { return engine_handles(); }
};

/// The bytes the engine's collectives sent: every communicator of the engine, each with its
/// sub-groups (not the caller's world of zoe_all_reduce_sum).
[[nodiscard]] engine::comm_stats engine_traffic(zoe_engine& e);

/// The engine's parameter id of `parameter`; usage_error naming it when unknown.
[[nodiscard]] engine::parameter_id layout_id(const zoe_engine& e, zoe_parameter_id parameter);

}  // namespace zoe::bindings
