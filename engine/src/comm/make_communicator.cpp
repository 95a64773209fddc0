// Chooses a communicator backend from comm_options (zoe.comm.backend) and the environment.
#include <memory>
#include <optional>
#include <string>

#include "backends.hpp"
#include "host_communicator.hpp"
#include "nccl_backend.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/launcher.hpp"

namespace zoe::engine {

std::unique_ptr<communicator> make_communicator(device& dev, const comm_options& options) {
  // The host program's collectives, when it gives them, are the only transport it means.
  if (options.host != nullptr) {
    if (options.backend != "auto" && options.backend != "host") {
      throw config_error(
          str("zoe.comm.backend: '", options.backend,
              "' names another backend than the host program's collectives it was given (auto or host)"));
    }
    return detail::make_host_communicator(dev, options);
  }
  if (options.backend == "host") {
    throw config_error("zoe.comm.backend: host needs the host program's collectives (zoe_engine_desc.host_comm)");
  }
  if (options.backend == "single") return make_single_communicator(dev);
  if (options.backend == "mpi") return detail::make_mpi_communicator(dev, options);
  // nccl refuses with a config_error naming what is missing: a CUDA device, CUDA in this build, NCCL.
  if (options.backend == "nccl") return detail::make_nccl_communicator(dev, options);
  if (options.backend == "auto") {
    // A launch of many ranks is one with a launcher's environment (launcher.hpp) saying so; a PMIx
    // launcher tells the size only through MPI, so its launch counts as many.
    const std::optional<launcher_ranks> launch = launcher_environment();
    if (!launch || !launch->many()) return make_single_communicator(dev);
    // NCCL on a CUDA device where it loads (bootstrapped through mpi); mpi otherwise.
    if (detail::nccl_usable(dev)) return detail::make_nccl_communicator(dev, options);
    return detail::make_mpi_communicator(dev, options);
  }
  throw config_error(
      str("zoe.comm.backend: unknown backend '", options.backend, "' (auto, single, mpi, nccl or host)"));
}

}  // namespace zoe::engine
