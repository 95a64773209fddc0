#pragma once
// The backends make_communicator chooses among, each built in its own file. The nccl backend's
// entry points are in nccl_backend.hpp (defined in every build: without CUDA it refuses, naming
// zoe.comm.backend).

#include <cstdint>
#include <memory>

#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// What an mpi world is made for.
enum class mpi_use : std::uint8_t {
  collectives,     ///< zoe's collectives: refused on a device other than the host
  nccl_bootstrap,  ///< the nccl backend's bootstrap: one broadcast of the unique id, before any other use
};

/// A world over MPI_COMM_WORLD (duplicated: every call an independent world) with its node-local,
/// cross-node and hpZ sub-groups. Collective. Throws as make_communicator documents; config_error
/// naming zoe.comm.backend for `collectives` on a device other than the host: the mpi backend's
/// blocking exchanges would run inside the device's host callbacks, which CUDA may serialise
/// across streams, so two worlds on two streams could deadlock until the timeout.
[[nodiscard]] std::unique_ptr<communicator> make_mpi_communicator(device& dev, const comm_options& options,
                                                                  mpi_use use = mpi_use::collectives);

}  // namespace zoe::engine::detail
