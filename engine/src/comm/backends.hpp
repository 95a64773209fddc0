#pragma once
// The backends make_communicator chooses among, each built in its own file. The nccl backend's
// entry points are in nccl_backend.hpp (defined in every build: without CUDA it refuses, naming
// zoe.comm.backend).

#include <memory>

#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// A world over MPI_COMM_WORLD (duplicated: every call an independent world) with its node-local,
/// cross-node and hpZ sub-groups. Collective. Throws as make_communicator documents.
[[nodiscard]] std::unique_ptr<communicator> make_mpi_communicator(device& dev, const comm_options& options);

}  // namespace zoe::engine::detail
