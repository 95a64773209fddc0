// ZeRO++'s quantized collectives on thread worlds of 2, 3 and 4 ranks in one process, every
// topology each allows (1 x 4, 2 x 2, 4 x 1, ...): the checks of quantized_checks.hpp without
// mpirun, so they also run under the sanitizers. Sizes and types are fewer than the mpi suite's:
// every thread shares the machine's two cores.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "quantized_checks.hpp"
#include "thread_world.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine {
namespace {

using kernels::dtype;
using zoe::testing::thread_world;

// Runs `check` on every rank of every thread world of 2, 3 and 4 ranks, each rank on its own stream.
template <class Check>
void on_every_world(const Check& check) {
  const std::unique_ptr<device> dev = make_host_device(256 * MiB);
  for (const std::size_t ranks : {std::size_t{2}, std::size_t{3}, std::size_t{4}}) {
    for (const std::size_t per_node : testing::topologies(ranks)) {
      SCOPED_TRACE(std::to_string(ranks / per_node) + " x " + std::to_string(per_node));
      thread_world world(ranks, {.ranks_per_node = per_node, .dev = dev.get()});
      world.run([&](std::size_t r) {
        const device_stream stream = dev->create_stream();
        check(world.rank(r), *dev, stream.view());
      });
    }
  }
}

TEST(quantized_collectives_threads, AllGatherIsWithinHalfAStepOnEveryWorld) {
  on_every_world([](communicator& w, device& dev, stream_view stream) {
    for (const std::size_t count : testing::sizes) {
      testing::check_gather(w, dev, stream, 11, count, count == 7 ? dtype::fp16 : dtype::fp32);
    }
    testing::check_gather(w, dev, stream, 12, 4097, dtype::bf16);
    testing::check_gather_in_place(w, dev, stream);
    testing::check_gather_coalesced(w, dev, stream);
  });
}

TEST(quantized_collectives_threads, ReduceScatterIsWithinTheBoundOnEveryTopology) {
  on_every_world([](communicator& w, device& dev, stream_view stream) {
    for (const std::size_t count : testing::sizes) {
      testing::check_reduce_scatter(w, dev, stream, 31, count, dtype::fp32, reduce_op::mean, false);
    }
    testing::check_reduce_scatter(w, dev, stream, 32, 4097, dtype::fp16, reduce_op::sum, true);
    testing::check_reduce_scatter(w, dev, stream, 33, 1000, dtype::bf16, reduce_op::mean, true);
  });
}

TEST(quantized_collectives_threads, QuantizedBytesAgainstThePlainCollectives) {
  on_every_world(
      [](communicator& w, device& dev, stream_view stream) { testing::check_bytes_against_plain(w, dev, stream); });
}

}  // namespace
}  // namespace zoe::engine
