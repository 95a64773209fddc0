// ZeRO++'s quantized collectives on the world this process is part of: world size 1 with the
// single communicator, or 2, 3 and 4 ranks under mpirun (label mpi), with every topology the world
// size allows (see quantized_checks.hpp for what each check asserts). The thread-world suite runs
// the same checks on 2, 3 and 4 ranks in one process.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>

#include "fake_device.hpp"
#include "quantized_checks.hpp"
#include "usage_message.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::engine {
namespace {

using kernels::dtype;
using zoe::testing::usage_message;

class quantized_collectives : public ::testing::Test {
 protected:
  std::unique_ptr<device> dev_ = make_host_device(256 * MiB);
  device_stream stream_ = dev_->create_stream();

  // A new world of every rank, `ranks_per_node` to a node (0: as the machine says).
  std::unique_ptr<communicator> world(std::size_t ranks_per_node) {
    comm_options options;
    options.ranks_per_node = ranks_per_node;
    return make_communicator(*dev_, options);
  }

  std::size_t world_size() { return world(0)->size(); }
};

std::string describe(dtype type, std::size_t count, const kernels::topology& topo) {
  return std::string(kernels::dtype_name(type)) + " x " + std::to_string(count) + " on " + std::to_string(topo.nodes) +
         " x " + std::to_string(topo.ranks_per_node);
}

// ---- qwZ -------------------------------------------------------------------------------------------

TEST_F(quantized_collectives, AllGatherIsWithinHalfAStepOfEveryShardForEveryTypeAndSize) {
  for (const std::size_t per_node : testing::topologies(world_size())) {
    const std::unique_ptr<communicator> w = world(per_node);
    for (const dtype type : testing::all_types) {
      for (const std::size_t count : testing::sizes) {
        SCOPED_TRACE(describe(type, count, qgz_topology(*w)));
        testing::check_gather(*w, *dev_, stream_.view(), 11, count, type);
      }
    }
  }
}

TEST_F(quantized_collectives, AllGatherSendsAQuarterOfFp32PlusScales) {
  // Whole blocks: the message is one byte per element and one fp32 scale per 2048.
  const std::size_t count = 4 * qwz_default_block;
  const std::size_t counted[] = {count};
  EXPECT_EQ(quantized_all_gather_message_bytes(counted), count + 4 * 4);
  EXPECT_LT(static_cast<double>(quantized_all_gather_message_bytes(counted)) / static_cast<double>(count * 4), 0.251);
  // A shard shorter than a block costs its own length rounded to 8, not a whole padded block.
  const std::size_t tiny[] = {7};
  EXPECT_EQ(quantized_all_gather_message_bytes(tiny), 16U);
  EXPECT_EQ(quantized_all_gather_scratch(3, 7), 48U);
}

TEST_F(quantized_collectives, AllGatherInPlaceGivesTheSameBitsOnEveryRank) {
  testing::check_gather_in_place(*world(0), *dev_, stream_.view());
}

TEST_F(quantized_collectives, CoalescedPartsTravelAsOneAllGatherAndMatchSeparateGathers) {
  testing::check_gather_coalesced(*world(0), *dev_, stream_.view());
}

TEST_F(quantized_collectives, AllGatherRefusesBadArgumentsNamingThem) {
  const std::unique_ptr<communicator> w = world(0);
  const device_allocation shard(*dev_, 4097 * 4);
  const device_allocation full(*dev_, w->size() * 4097 * 4);
  const std::size_t need = quantized_all_gather_scratch(w->size(), 4097);
  const device_allocation scratch(*dev_, need + 16);
  const quantized_gather_part part{shard.data(), full.data(), 4097, dtype::fp32};
  EXPECT_NE(usage_message([&] {
              quantized_all_gather(*w, *dev_, part, scratch.span().first(need - 1), stream_.view());
            }).find("scratch holds"),
            std::string::npos);
  EXPECT_NE(usage_message([&] {
              quantized_all_gather(*w, *dev_, part, scratch.span().subspan(4, need), stream_.view());
            }).find("aligned"),
            std::string::npos);
  EXPECT_NE(
      usage_message([&] { quantized_all_gather(*w, *dev_, part, scratch.span(), stream_.view(), 12); }).find("block"),
      std::string::npos);
  EXPECT_NE(usage_message([&] {
              quantized_all_gather(*w, *dev_, quantized_gather_part{nullptr, full.data(), 4097, dtype::fp32},
                                   scratch.span(), stream_.view());
            }).find("null send"),
            std::string::npos);
  dev_->synchronize(stream_.view());
}

// ---- qgZ -------------------------------------------------------------------------------------------

TEST_F(quantized_collectives, ReduceScatterIsWithinTheQuantizersBoundOnEveryTopologyTypeAndSize) {
  for (const std::size_t per_node : testing::topologies(world_size())) {
    const std::unique_ptr<communicator> w = world(per_node);
    for (const dtype type : testing::all_types) {
      for (const std::size_t count : testing::sizes) {
        SCOPED_TRACE(describe(type, count, qgz_topology(*w)));
        testing::check_reduce_scatter(*w, *dev_, stream_.view(), 31, count, type, reduce_op::mean, false);
      }
    }
  }
}

TEST_F(quantized_collectives, ReduceScatterInPlaceAndSum) {
  for (const std::size_t per_node : testing::topologies(world_size())) {
    const std::unique_ptr<communicator> w = world(per_node);
    SCOPED_TRACE(std::to_string(per_node) + " per node");
    testing::check_reduce_scatter(*w, *dev_, stream_.view(), 32, 4097, dtype::fp32, reduce_op::sum, true);
    testing::check_reduce_scatter(*w, *dev_, stream_.view(), 33, 1000, dtype::bf16, reduce_op::mean, true);
  }
}

TEST_F(quantized_collectives, QuantizedBytesAgainstThePlainCollectives) {
  for (const std::size_t per_node : testing::topologies(world_size())) {
    const std::unique_ptr<communicator> w = world(per_node);
    SCOPED_TRACE(std::to_string(per_node) + " per node");
    testing::check_bytes_against_plain(*w, *dev_, stream_.view());
  }
}

TEST_F(quantized_collectives, ReduceScatterRefusesBadArgumentsNamingThem) {
  const std::unique_ptr<communicator> w = world(0);
  const std::size_t count = 100;
  const device_allocation send(*dev_, w->size() * count * 4);
  const device_allocation recv(*dev_, count * 4);
  const std::size_t need = quantized_reduce_scatter_scratch(qgz_topology(*w), count, dev_->kind());
  const device_allocation scratch(*dev_, need + 16);
  const auto run = [&](const void* s, void* r, dtype type, reduce_op op, std::span<std::byte> sc, std::size_t block) {
    return usage_message(
        [&] { quantized_reduce_scatter(*w, *dev_, s, r, count, type, op, sc, stream_.view(), block); });
  };
  EXPECT_NE(
      run(send.data(), recv.data(), dtype::fp32, reduce_op::mean, scratch.span().first(need - 1), qgz_default_block)
          .find("scratch holds"),
      std::string::npos);
  EXPECT_NE(run(send.data(), recv.data(), dtype::fp32, reduce_op::mean, scratch.span(), 4).find("block"),
            std::string::npos);
  EXPECT_NE(
      run(nullptr, recv.data(), dtype::fp32, reduce_op::mean, scratch.span(), qgz_default_block).find("null send"),
      std::string::npos);
  EXPECT_NE(run(send.data(), recv.data(), static_cast<dtype>(7), reduce_op::mean, scratch.span(), qgz_default_block)
                .find("element type"),
            std::string::npos);
  EXPECT_NE(run(send.data(), recv.data(), dtype::fp32, static_cast<reduce_op>(9), scratch.span(), qgz_default_block)
                .find("reduce_op"),
            std::string::npos);
  dev_->synchronize(stream_.view());
}

// ---- both --------------------------------------------------------------------------------------------

// On a CUDA device the quantized collectives run the kernels' CUDA launchers (launch_kernel's CUDA
// branch), and qgZ's scratch holds their fp32 workspace, which the host needs none of. Without CUDA
// in the build, a device that reports CUDA proves the routing: the launchers throw device_error.
TEST_F(quantized_collectives, OnACudaDeviceTheCudaLaunchersRunWithTheirWorkspace) {
  if (kernels::cuda::available()) GTEST_SKIP() << "a CUDA build: the launchers would run on host memory";
  zoe::testing::fake_device cuda(make_host_device(64 * MiB));
  cuda.report_kind(device_kind::cuda);
  const device_stream stream = cuda.create_stream();
  const std::unique_ptr<communicator> w = world(0);
  const kernels::topology topo = qgz_topology(*w);
  const std::size_t count = 4097;
  const std::size_t host = quantized_reduce_scatter_scratch(topo, count, device_kind::host);
  const std::size_t device = quantized_reduce_scatter_scratch(topo, count, device_kind::cuda);
  EXPECT_EQ(device - host, (kernels::cuda::reduce_requantize_workspace(count) + 15) / 16 * 16);

  const device_allocation send(*dev_, w->size() * count * 4);
  const device_allocation recv(*dev_, w->size() * count * 4);
  const device_allocation gather_scratch(*dev_, quantized_all_gather_scratch(w->size(), count));
  const device_allocation reduce_scratch(*dev_, device);
  const auto names_cuda = [](const auto& run) {
    try {
      run();
      ADD_FAILURE() << "the CUDA launcher did not run";
    } catch (const device_error& e) {
      EXPECT_NE(std::string(e.what()).find("kernels::cuda::quantize"), std::string::npos) << e.what();
    }
  };
  names_cuda([&] {
    quantized_all_gather(*w, cuda, quantized_gather_part{send.data(), recv.data(), count, dtype::fp16},
                         gather_scratch.span(), stream.view());
  });
  names_cuda([&] {
    quantized_reduce_scatter(*w, cuda, send.data(), recv.data(), count, dtype::fp32, reduce_op::mean,
                             reduce_scratch.span(), stream.view());
  });
  cuda.synchronize(stream.view());
}

}  // namespace
}  // namespace zoe::engine
