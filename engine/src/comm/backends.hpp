#pragma once
// The backends make_communicator chooses among, each built in its own file. The nccl backend's
// factory is defined by engine/src/comm/nccl_*.cpp when the build has it (ZOE_HAVE_NCCL); without
// it make_communicator refuses "nccl" naming zoe.comm.backend.

#include <memory>

#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// A world over MPI_COMM_WORLD (duplicated: every call an independent world) with its node-local,
/// cross-node and hpZ sub-groups. Collective. Throws as make_communicator documents.
[[nodiscard]] std::unique_ptr<communicator> make_mpi_communicator(device& dev, const comm_options& options);

#ifdef ZOE_HAVE_NCCL
/// A world over NCCL on a CUDA device, bootstrapped through MPI. Collective.
[[nodiscard]] std::unique_ptr<communicator> make_nccl_communicator(device& dev, const comm_options& options);
#endif

}  // namespace zoe::engine::detail
