// A build without CUDA: the nccl backend refuses, saying why (its loader is still built and tested).
#include "nccl_backend.hpp"
#include "zoe/core/error.hpp"

namespace zoe::engine::detail {

std::unique_ptr<communicator> make_nccl_communicator(device& /*dev*/, communicator& /*bootstrap*/,
                                                     const comm_options& /*options*/) {
  throw config_error("zoe.comm.backend: nccl needs a CUDA device, and zoe was built without CUDA (ZOE_WITH_CUDA=OFF)");
}

}  // namespace zoe::engine::detail
