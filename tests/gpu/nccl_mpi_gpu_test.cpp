// The nccl backend as make_communicator builds it (backend "nccl": an mpi bootstrap world, then
// NCCL) under mpirun, one GPU per rank: an all-gather and a sum all-reduce of rank-specific values
// against what each rank computes itself, and the bytes counted per destination. Skips (on every
// rank alike) without a GPU per rank or without NCCL.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <vector>

#include "nccl_backend.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/gpu_probe.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine {
namespace {

using namespace std::chrono_literals;

// The launcher's view, before MPI starts: how many ranks, and this rank's place on its node.
std::size_t launcher_number(const char* name) {
  const char* text = std::getenv(name);
  return text == nullptr ? 0 : static_cast<std::size_t>(std::strtoul(text, nullptr, 10));
}

TEST(nccl_mpi_gpu, make_communicator_bootstraps_nccl_through_mpi) {
  const std::size_t ranks = std::max<std::size_t>(1, launcher_number("OMPI_COMM_WORLD_SIZE"));
  const gpu_probe_result gpus = probe_gpu();
  if (!gpus.usable || static_cast<std::size_t>(gpus.device_count) < ranks) {
    GTEST_SKIP() << "needs a GPU per rank (" << ranks << "): " << gpus.reason;
  }
  const std::unique_ptr<device> dev = make_cuda_device(static_cast<int>(launcher_number("OMPI_COMM_WORLD_LOCAL_RANK")));
  if (!detail::nccl_usable(*dev)) GTEST_SKIP() << "NCCL (libnccl.so.2) does not load here";
  comm_options options;
  options.backend = "nccl";
  options.timeout = 60s;
  const std::unique_ptr<communicator> comm = make_communicator(*dev, options);
  ASSERT_EQ(comm->size(), ranks);
  EXPECT_EQ(comm->name(), "nccl (world)");
  const std::size_t me = comm->rank();

  constexpr std::size_t n = 7;  // divides nothing
  std::vector<float> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<float>(me * 100 + i);
  const device_stream stream = dev->create_stream();
  const stream_view s = stream.view();
  void* send = dev->allocate(n * sizeof(float), s);
  void* recv = dev->allocate(ranks * n * sizeof(float), s);
  dev->copy_async(send, mine.data(), n * sizeof(float), copy_kind::host_to_device, s);

  comm->all_gather(send, recv, n * sizeof(float), s);
  std::vector<float> gathered(ranks * n);
  dev->copy_async(gathered.data(), recv, gathered.size() * sizeof(float), copy_kind::device_to_host, s);
  dev->synchronize(s);
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(gathered[r * n + i], static_cast<float>(r * 100 + i));
  }

  comm->all_reduce(send, recv, n, kernels::dtype::fp32, reduce_op::sum, s);
  std::vector<float> summed(n);
  dev->copy_async(summed.data(), recv, n * sizeof(float), copy_kind::device_to_host, s);
  dev->synchronize(s);
  for (std::size_t i = 0; i < n; ++i) {
    float expected = 0;
    for (std::size_t r = 0; r < ranks; ++r) expected += static_cast<float>(r * 100 + i);
    EXPECT_EQ(summed[i], expected);
  }
  comm->barrier();

  // All ranks on one node (no ranks_per_node given, one machine): every byte is intra-node.
  const comm_stats stats = comm->stats();
  EXPECT_EQ(stats.calls, 2U);
  EXPECT_EQ(stats.of(collective::all_gather).intra_node, (ranks - 1) * n * sizeof(float));
  EXPECT_EQ(stats.total().inter_node, 0U);
  dev->deallocate(recv, ranks * n * sizeof(float), s);
  dev->deallocate(send, n * sizeof(float), s);
  dev->synchronize(s);
}

}  // namespace
}  // namespace zoe::engine
