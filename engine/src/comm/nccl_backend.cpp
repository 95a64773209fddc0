// The nccl backend's hook for make_communicator: checks the device, makes the mpi bootstrap world
// and hands it to the CUDA-only backend (nccl_communicator.cpp, or its stand-in without CUDA).
#include "nccl_backend.hpp"

#include <exception>

#include "backends.hpp"
#include "nccl_library.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/gpu_probe.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {

bool nccl_usable(const device& dev) noexcept {
  if (!built_with_cuda() || dev.kind() != device_kind::cuda) return false;
  try {
    (void)nccl::process_library();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::unique_ptr<communicator> make_nccl_communicator(device& dev, const comm_options& options) {
  if (dev.kind() != device_kind::cuda) {
    throw config_error(str("zoe.comm.backend: nccl needs a CUDA device, and this world is on ", dev.name(),
                           " (choose the mpi or single backend, or the cuda device)"));
  }
  comm_options bootstrap_options = options;
  bootstrap_options.backend = "mpi";
  // The bootstrap broadcasts the unique id once, before any other use: no callbacks of two worlds
  // can wait on each other, so the mpi backend's refusal of a CUDA device does not apply.
  const std::unique_ptr<communicator> bootstrap =
      make_mpi_communicator(dev, bootstrap_options, mpi_use::nccl_bootstrap);
  return make_nccl_communicator(dev, *bootstrap, options);
}

}  // namespace zoe::engine::detail
