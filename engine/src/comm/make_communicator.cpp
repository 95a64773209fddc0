// Chooses a communicator backend from comm_options (zoe.comm.backend) and the environment.
#include <cstdlib>
#include <memory>
#include <string>

#include "backends.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine {
namespace {

// The number in environment variable `name`, or 0 when it is unset or not a number.
long environment_number(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return end != text && *end == '\0' ? value : 0;
}

// True when an MPI launcher started this process as one of several ranks: Open MPI's mpirun sets
// OMPI_COMM_WORLD_SIZE, PMI launchers (MPICH, Slurm) PMI_SIZE; a PMIx launcher sets PMIX_RANK
// (the size is known only once MPI starts, so it counts as launched).
bool launched_as_many_ranks() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) return environment_number("OMPI_COMM_WORLD_SIZE") > 1;
  if (std::getenv("PMI_SIZE") != nullptr) return environment_number("PMI_SIZE") > 1;
  return std::getenv("PMIX_RANK") != nullptr;
}

std::unique_ptr<communicator> make_nccl(device& dev, const comm_options& options) {
#ifdef ZOE_HAVE_NCCL
  return detail::make_nccl_communicator(dev, options);
#else
  (void)dev;
  (void)options;
  throw config_error("zoe.comm.backend: 'nccl' is not built into this zoe (available: auto, single, mpi)");
#endif
}

}  // namespace

std::unique_ptr<communicator> make_communicator(device& dev, const comm_options& options) {
  if (options.backend == "single") return make_single_communicator(dev);
  if (options.backend == "mpi") return detail::make_mpi_communicator(dev, options);
  if (options.backend == "nccl") return make_nccl(dev, options);
  if (options.backend == "auto") {
    if (!launched_as_many_ranks()) return make_single_communicator(dev);
    // The nccl backend, once built, takes CUDA devices here (where NCCL loads); mpi otherwise.
    return detail::make_mpi_communicator(dev, options);
  }
  throw config_error(str("zoe.comm.backend: unknown backend '", options.backend, "' (auto, single, mpi or nccl)"));
}

}  // namespace zoe::engine
