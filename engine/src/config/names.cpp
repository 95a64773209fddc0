// Names of the config's enumerations, as they are written in JSON and in messages.
#include "zoe/engine/config/config.hpp"

namespace zoe::engine {

std::string_view offload_device_name(offload_device d) noexcept {
  switch (d) {
    case offload_device::none: return "none";
    case offload_device::cpu: return "cpu";
    case offload_device::nvme: return "nvme";
  }
  return "unknown";
}

std::string_view state_kind_name(state_kind s) noexcept {
  switch (s) {
    case state_kind::working: return "working";
    case state_kind::gradient: return "gradient";
    case state_kind::master: return "master";
    case state_kind::exp_avg: return "exp_avg";
    case state_kind::exp_avg_sq: return "exp_avg_sq";
  }
  return "unknown";
}

}  // namespace zoe::engine
