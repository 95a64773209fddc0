// The nccl backend on a real GPU at world size 1, bootstrapped through the single communicator:
// every collective moves the right bytes through NCCL, in place where the seam allows it, counts
// its call and sends nothing (its reductions are copies that NCCL is not asked for: see
// nccl_communicator.cpp reduce_alone). Skips without a GPU or NCCL.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "nccl_backend.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/gpu_probe.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {
namespace {

using namespace std::chrono_literals;
using kernels::dtype;

TEST(nccl_gpu, a_world_of_one_runs_every_collective) {
  if (!built_with_cuda() || !probe_gpu().usable) GTEST_SKIP() << "no usable GPU: " << probe_gpu().reason;
  const std::unique_ptr<device> dev = make_cuda_device(0);
  if (!nccl_usable(*dev)) GTEST_SKIP() << "NCCL (libnccl.so.2) does not load here";
  const std::unique_ptr<communicator> bootstrap = make_single_communicator(*dev);
  comm_options options;
  options.backend = "nccl";
  options.timeout = 60s;
  const std::unique_ptr<communicator> comm = make_nccl_communicator(*dev, *bootstrap, options);
  EXPECT_EQ(comm->size(), 1U);
  EXPECT_EQ(comm->rank(), 0U);
  EXPECT_EQ(comm->name(), "nccl (world)");
  EXPECT_EQ(&comm->node_local(), comm.get());
  EXPECT_EQ(&comm->cross_node(), comm.get());
  EXPECT_EQ(&comm->hpz(), comm.get());

  // 4097 elements: a size that divides nothing.
  constexpr std::size_t n = 4097;
  constexpr std::size_t bytes = n * sizeof(float);
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.5F - 7.0F;
  const device_stream stream = dev->create_stream();
  const stream_view s = stream.view();
  void* send = dev->allocate(bytes, s);
  void* recv = dev->allocate(bytes, s);
  dev->copy_async(send, in.data(), bytes, copy_kind::host_to_device, s);
  const auto expect_recv = [&](const char* what, std::size_t count) {
    std::vector<float> out(n, -1.0F);
    dev->copy_async(out.data(), recv, bytes, copy_kind::device_to_host, s);
    dev->synchronize(s);
    // The first element that differs, bit for bit, says more than memcmp's sign.
    for (std::size_t i = 0; i < count; ++i) {
      if (std::memcmp(&out[i], &in[i], sizeof(float)) != 0) {
        ADD_FAILURE() << what << ": element " << i << " of " << count << " is " << out[i] << ", expected " << in[i];
        break;
      }
    }
    dev->memset_async(recv, 0, bytes, s);
  };

  comm->all_gather(send, recv, bytes, s);
  expect_recv("all_gather", n);
  comm->all_reduce(send, recv, n, dtype::fp32, reduce_op::mean, s);
  expect_recv("all_reduce mean", n);
  comm->reduce_scatter(send, recv, n, dtype::fp32, reduce_op::sum, s);
  expect_recv("reduce_scatter sum", n);
  comm->reduce_scatter(send, recv, n, dtype::fp32, reduce_op::mean, s);
  expect_recv("reduce_scatter mean", n);
  comm->all_to_all(send, recv, bytes, s);
  expect_recv("all_to_all", n);
  const std::array<gather_part, 2> parts{
      gather_part{send, recv, 7 * sizeof(float)},
      gather_part{static_cast<const float*>(send) + 7, static_cast<float*>(recv) + 7, 1 * sizeof(float)}};
  comm->all_gather_coalesced(parts, s);
  expect_recv("all_gather_coalesced", 8);
  dev->copy_async(recv, send, bytes, copy_kind::device_to_device, s);
  comm->all_reduce(recv, recv, n, dtype::fp32, reduce_op::sum, s);  // in place
  comm->broadcast(recv, bytes, 0, s);
  expect_recv("in-place all_reduce, then broadcast", n);
  comm->barrier();

  const comm_stats stats = total_stats(*comm);
  EXPECT_EQ(stats.calls, 8U) << "barriers are not counted";
  EXPECT_EQ(stats.total_bytes(), 0U) << "nothing leaves a lone rank";
  dev->deallocate(recv, bytes, s);
  dev->deallocate(send, bytes, s);
  dev->synchronize(s);
}

}  // namespace
}  // namespace zoe::engine::detail
