// Chooses a communicator backend from comm_options (zoe.comm.backend) and the environment.
#include <cstdlib>
#include <memory>

#include "nccl_backend.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine {

std::unique_ptr<communicator> make_communicator(device& dev, const comm_options& options) {
  if (options.backend == "single") return make_single_communicator(dev);
  if (options.backend == "nccl") return detail::make_nccl_communicator(dev, options);
  if (options.backend == "auto") {
    // Launched by mpirun with more than one rank: the mpi backend (not built yet: see below), or
    // nccl on a CUDA device where NCCL loads.
    const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (world == nullptr || std::atoi(world) <= 1) return make_single_communicator(dev);
    if (detail::nccl_usable(dev)) return detail::make_nccl_communicator(dev, options);
  }
  throw config_error(
      str("zoe.comm.backend: '", options.backend, "' is not available in this build (available: auto, single, nccl)"));
}

}  // namespace zoe::engine
