#pragma once
// The nccl backend's entry points, for make_communicator (backend "nccl", and "auto" on a CUDA
// device) and for tests. The backend itself (nccl_communicator.cpp) is built only with CUDA; a build
// without it refuses with a config_error that says so.

#include <memory>

#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// Whether the nccl backend can run on `dev`: zoe was built with CUDA, `dev` is a CUDA device and
/// NCCL loads (nccl_library.hpp). Never throws.
[[nodiscard]] bool nccl_usable(const device& dev) noexcept;

/// A world over NCCL on `dev`, bootstrapped through a world of the mpi backend that this call makes
/// (make_communicator with backend "mpi" and the same sizes) and drops once NCCL has started.
/// Collective. Throws config_error naming zoe.comm.backend when `dev` is
/// not a CUDA device ("nccl needs a CUDA device"), zoe was built without CUDA, NCCL does not load or
/// the mpi backend is unavailable; comm_error when NCCL fails to start.
[[nodiscard]] std::unique_ptr<communicator> make_nccl_communicator(device& dev, const comm_options& options);

/// A world over NCCL on `dev` whose ranks are those of `bootstrap` (any world communicator of the
/// seam, on the same device: the mpi backend in production, the single backend at world size 1).
/// Collective over `bootstrap`: its rank 0 makes NCCL's unique id and broadcasts it, likewise for
/// each sub-group where NCCL lacks ncclCommSplit. The node and hpZ topology are the bootstrap's
/// (its node_local() and hpz() sizes). `bootstrap` is not used after this returns. Throws as the
/// overload above (except for the mpi backend).
[[nodiscard]] std::unique_ptr<communicator> make_nccl_communicator(device& dev, communicator& bootstrap,
                                                                   const comm_options& options);

}  // namespace zoe::engine::detail
