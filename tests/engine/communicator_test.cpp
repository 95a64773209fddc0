// The single communicator on the host device: each collective is the identity, in stream order,
// copying nothing in place; its arguments are checked with messages naming the collective; and the
// byte-counting rule every backend shares.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fake_device.hpp"
#include "zoe/core/device.hpp"
#include "usage_message.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/launcher.hpp"

namespace zoe::engine {
namespace {

using zoe::testing::usage_message;

using kernels::dtype;
using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// One collective at world size 1, run from send to recv over `bytes` (a multiple of 4).
struct collective_case {
  const char* name;
  collective kind;
  std::function<void(communicator&, const void*, void*, std::size_t, stream_view)> run;
};

std::vector<collective_case> identity_collectives() {
  return {
      {"all_gather", collective::all_gather,
       [](communicator& c, const void* s, void* r, std::size_t b, stream_view st) { c.all_gather(s, r, b, st); }},
      {"reduce_scatter_sum_fp16", collective::reduce_scatter,
       [](communicator& c, const void* s, void* r, std::size_t b, stream_view st) {
         c.reduce_scatter(s, r, b / 2, dtype::fp16, reduce_op::sum, st);
       }},
      {"reduce_scatter_mean_bf16", collective::reduce_scatter,
       [](communicator& c, const void* s, void* r, std::size_t b, stream_view st) {
         c.reduce_scatter(s, r, b / 2, dtype::bf16, reduce_op::mean, st);
       }},
      {"all_to_all", collective::all_to_all,
       [](communicator& c, const void* s, void* r, std::size_t b, stream_view st) { c.all_to_all(s, r, b, st); }},
      {"all_reduce_sum_fp32", collective::all_reduce,
       [](communicator& c, const void* s, void* r, std::size_t b, stream_view st) {
         c.all_reduce(s, r, b / 4, dtype::fp32, reduce_op::sum, st);
       }},
      {"all_reduce_mean_fp32", collective::all_reduce,
       [](communicator& c, const void* s, void* r, std::size_t b, stream_view st) {
         c.all_reduce(s, r, b / 4, dtype::fp32, reduce_op::mean, st);
       }},
  };
}

void fill_pattern(std::byte* p, std::size_t bytes, unsigned seed) {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
}

TEST(single_communicator, IsOneRankWhoseSubGroupsAreItself) {
  auto dev = make_host_device(16 * MiB);
  auto comm = make_single_communicator(*dev);
  EXPECT_EQ(comm->rank(), 0U);
  EXPECT_EQ(comm->size(), 1U);
  EXPECT_THAT(comm->name(), HasSubstr("single"));
  EXPECT_EQ(&comm->node_local(), comm.get());
  EXPECT_EQ(&comm->cross_node(), comm.get());
  comm->barrier();
}

TEST(single_communicator, EveryCollectiveDeliversItsInputAndCountsACallWithNoBytes) {
  auto dev = make_host_device(16 * MiB);
  auto comm = make_single_communicator(*dev);
  const device_stream stream = dev->create_stream();
  constexpr std::size_t bytes = 64 * KiB + 12;
  const device_allocation send(*dev, bytes);
  const device_allocation recv(*dev, bytes);
  std::uint64_t calls = 0;
  for (const collective_case& c : identity_collectives()) {
    SCOPED_TRACE(c.name);
    fill_pattern(send.data(), bytes, static_cast<unsigned>(calls));
    std::memset(recv.data(), 0, bytes);
    c.run(*comm, send.data(), recv.data(), bytes, stream.view());
    dev->synchronize(stream.view());
    EXPECT_EQ(std::memcmp(send.data(), recv.data(), bytes), 0);
    ++calls;
  }
  std::array<std::byte, 16> root_data{};
  comm->broadcast(root_data.data(), root_data.size(), 0, stream.view());
  comm->point_to_point(root_data.data(), root_data.size(), 0, 0, stream.view());
  const comm_stats stats = comm->stats();
  EXPECT_EQ(stats.calls, calls + 2);
  EXPECT_EQ(stats.total_bytes(), 0U) << "at world size 1 nothing leaves the rank";
}

TEST(single_communicator, InPlaceCollectivesCopyNothingAndOthersCopyOnce) {
  testing::fake_device dev(make_host_device(16 * MiB));
  auto comm = make_single_communicator(dev);
  const device_stream stream = dev.create_stream();
  constexpr std::size_t bytes = 4096;
  const device_allocation a(dev, bytes);
  const device_allocation b(dev, bytes);
  for (const collective_case& c : identity_collectives()) {
    SCOPED_TRACE(c.name);
    fill_pattern(a.data(), bytes, 7);
    const int before = dev.calls().copy_async;
    c.run(*comm, a.data(), a.data(), bytes, stream.view());
    dev.synchronize(stream.view());
    EXPECT_EQ(dev.calls().copy_async, before) << "in place: the data is where it belongs already";
    std::vector<std::byte> expected(bytes);
    fill_pattern(expected.data(), bytes, 7);
    EXPECT_EQ(std::memcmp(a.data(), expected.data(), bytes), 0);
    c.run(*comm, a.data(), b.data(), bytes, stream.view());
    dev.synchronize(stream.view());
    EXPECT_EQ(dev.calls().copy_async, before + 1);
  }
  const int before = dev.calls().copy_async;
  comm->broadcast(a.data(), bytes, 0, stream.view());
  EXPECT_EQ(dev.calls().copy_async, before) << "a broadcast from the only rank moves nothing";
}

TEST(single_communicator, CollectivesRunInStreamOrder) {
  // Host tasks are held back on the stream: a collective that ran at once, rather than after the
  // task before it, would copy the old contents, and the task after it would see an unwritten recv.
  testing::fake_device dev(make_host_device(16 * MiB));
  dev.delay_tasks(20ms);
  auto comm = make_single_communicator(dev);
  const device_stream stream = dev.create_stream();
  constexpr std::size_t bytes = 8192;
  const device_allocation send(dev, bytes);
  const device_allocation recv(dev, bytes);
  for (const collective_case& c : identity_collectives()) {
    SCOPED_TRACE(c.name);
    std::memset(send.data(), 0, bytes);
    std::memset(recv.data(), 0, bytes);
    std::byte* s = send.data();
    std::byte* r = recv.data();
    dev.launch_host(stream.view(), [s] { fill_pattern(s, bytes, 3); });
    c.run(*comm, s, r, bytes, stream.view());
    bool seen_after = false;
    dev.launch_host(stream.view(), [&seen_after, r] {
      std::vector<std::byte> expected(bytes);
      fill_pattern(expected.data(), bytes, 3);
      seen_after = std::memcmp(r, expected.data(), bytes) == 0;
      std::memset(r, 0xee, bytes);  // overwritten after the collective
    });
    dev.synchronize(stream.view());
    EXPECT_TRUE(seen_after) << "the task after the collective saw its result";
    EXPECT_EQ(recv.data()[0], std::byte{0xee}) << "and the collective did not run after that task";
  }
}

TEST(single_communicator, StatsMayBeReadWhileCollectivesRun) {
  auto dev = make_host_device(16 * MiB);
  auto comm = make_single_communicator(*dev);
  const device_stream stream = dev->create_stream();
  const device_allocation a(*dev, 256);
  const device_allocation b(*dev, 256);
  constexpr int rounds = 200;
  std::atomic<bool> done{false};
  std::uint64_t last_seen = 0;
  bool monotonic = true;
  std::thread reader([&] {
    while (!done.load()) {
      const std::uint64_t calls = comm->stats().calls;
      monotonic = monotonic && calls >= last_seen;
      last_seen = calls;
    }
  });
  for (int i = 0; i < rounds; ++i) comm->all_gather(a.data(), b.data(), 256, stream.view());
  done.store(true);
  reader.join();
  dev->synchronize(stream.view());
  EXPECT_TRUE(monotonic);
  EXPECT_EQ(comm->stats().calls, static_cast<std::uint64_t>(rounds));
}

TEST(single_communicator, BadArgumentsNameTheCollective) {
  auto dev = make_host_device(16 * MiB);
  auto comm = make_single_communicator(*dev);
  const device_stream stream = dev->create_stream();
  const device_allocation buf(*dev, 4096);
  std::byte* p = buf.data();
  const stream_view s = stream.view();
  EXPECT_THAT(usage_message([&] { comm->all_gather(nullptr, p, 16, s); }),
              AllOf(HasSubstr("all_gather on single (world)"), HasSubstr("send buffer is null with 16 bytes")));
  EXPECT_THAT(usage_message([&] { comm->all_to_all(p, nullptr, 16, s); }),
              AllOf(HasSubstr("all_to_all on single (world)"), HasSubstr("recv buffer is null")));
  EXPECT_THAT(usage_message([&] { comm->all_gather(p, p + 8, 16, s); }),
              AllOf(HasSubstr("all_gather on single (world)"), HasSubstr("overlaps")));
  EXPECT_THAT(usage_message([&] { comm->all_reduce(p + 4, p, 4, dtype::fp32, reduce_op::sum, s); }),
              AllOf(HasSubstr("all_reduce on single (world)"), HasSubstr("overlaps")));
  EXPECT_THAT(usage_message([&] { comm->reduce_scatter(p, p + 2048, 16, static_cast<dtype>(9), reduce_op::sum, s); }),
              AllOf(HasSubstr("reduce_scatter on single (world)"), HasSubstr("unknown dtype 9")));
  EXPECT_THAT(usage_message([&] { comm->all_reduce(p, p + 2048, 16, dtype::fp16, static_cast<reduce_op>(7), s); }),
              AllOf(HasSubstr("all_reduce on single (world)"), HasSubstr("unknown reduce_op 7")));
  EXPECT_THAT(usage_message([&] {
                comm->all_reduce(p, p + 2048, std::numeric_limits<std::size_t>::max(), dtype::fp32, reduce_op::sum, s);
              }),
              AllOf(HasSubstr("all_reduce on single (world)"), HasSubstr("overflow")));
  EXPECT_THAT(usage_message([&] { comm->broadcast(p, 16, 1, s); }),
              AllOf(HasSubstr("broadcast on single (world)"), HasSubstr("root 1 is not a rank of the group (size 1)")));
  EXPECT_THAT(usage_message([&] { comm->broadcast(nullptr, 16, 0, s); }),
              AllOf(HasSubstr("broadcast on single (world)"), HasSubstr("null")));
  EXPECT_THAT(usage_message([&] { comm->point_to_point(p, 16, 0, 1, s); }),
              AllOf(HasSubstr("point_to_point on single (world)"),
                    HasSubstr("from 0 or to 1 is not a rank of the group (size 1)")));
  EXPECT_EQ(comm->stats().calls, 0U) << "a refused call is not counted";
  // Zero bytes need no buffer.
  comm->all_gather(nullptr, nullptr, 0, s);
  EXPECT_EQ(comm->stats().calls, 1U);
}

TEST(bytes_to, IsWhatTheDirectAlgorithmsSendFromTheRankToEachOther) {
  for (std::size_t dest = 0; dest < 4; ++dest) {
    const std::uint64_t other = dest == 2 ? 0 : 1;
    EXPECT_EQ(bytes_to(collective::all_gather, 4, 2, dest, 100), other * 100);
    EXPECT_EQ(bytes_to(collective::reduce_scatter, 4, 2, dest, 10), other * 10);
    EXPECT_EQ(bytes_to(collective::all_to_all, 4, 2, dest, 4096), other * 4096);
  }
  // 10 fp32 elements over 3 ranks: chunks of 3, 3 and 4 elements.
  EXPECT_EQ(bytes_to(collective::all_reduce, 3, 0, 1, 40, 0, 4), 24U) << "chunk 1 out, chunk 0 back";
  EXPECT_EQ(bytes_to(collective::all_reduce, 3, 0, 2, 40, 0, 4), 28U);
  EXPECT_EQ(bytes_to(collective::all_reduce, 3, 2, 0, 40, 0, 4), 28U);
  const std::uint64_t huge = std::numeric_limits<std::uint64_t>::max() / 2;
  EXPECT_EQ(bytes_to(collective::all_reduce, 2, 0, 1, huge - 1), huge - 1) << "no overflow in the intermediate";
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t d = 0; d < 4; ++d) {
      EXPECT_EQ(bytes_to(collective::broadcast, 4, r, d, 64, 2), r == 2 && d != 2 ? 64U : 0U);
    }
  }
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t d = 0; d < 4; ++d) {
      // The sender (rank 1) passes the message's bytes, the others 0; the receiver is rank 3.
      EXPECT_EQ(bytes_to(collective::point_to_point, 4, r, d, r == 1 ? 64 : 0, 3), r == 1 && d == 3 ? 64U : 0U);
    }
  }
  EXPECT_EQ(bytes_to(collective::point_to_point, 4, 2, 2, 64, 2), 0U) << "from == to sends nothing";
  for (const collective c : {collective::all_gather, collective::reduce_scatter, collective::all_to_all,
                             collective::all_reduce, collective::broadcast, collective::point_to_point}) {
    EXPECT_EQ(bytes_to(c, 1, 0, 0, 1 << 20), 0U) << collective_name(c) << ": nothing leaves a lone rank";
  }
}

TEST(total_stats, CountsEachDistinctGroupOnce) {
  auto dev = make_host_device(16 * MiB);
  auto comm = make_single_communicator(*dev);
  comm->barrier();
  comm->all_gather(nullptr, nullptr, 0, {});
  EXPECT_EQ(total_stats(*comm).calls, 1U) << "the sub-groups of a lone rank are the world itself";
}

// Outside mpirun (as ctest runs this binary), auto is single and nothing starts MPI; the mpi
// backend's own cases run under mpirun (mpi_communicator_test.cpp).
TEST(make_communicator, ChoosesSingleOutsideALauncherAndNamesTheKeyForWhatItLacks) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
      std::getenv("PMIX_RANK") != nullptr) {
    GTEST_SKIP() << "launched by an MPI launcher";
  }
  auto dev = make_host_device(16 * MiB);
  comm_options options;
  EXPECT_EQ(options.backend, "auto");
  EXPECT_EQ(make_communicator(*dev, options)->name(), "single (world)");
  options.backend = "single";
  EXPECT_EQ(make_communicator(*dev, options)->name(), "single (world)");
  for (const char* backend : {"nccl", "carrier-pigeon"}) {
    options.backend = backend;
    try {
      (void)make_communicator(*dev, options);
      ADD_FAILURE() << backend << " accepted";
    } catch (const config_error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("zoe.comm.backend"), HasSubstr(backend)));
    }
  }
}

// The launcher variables, set for one case and restored after it (unset when they were unset).
class launcher_variables {
 public:
  static constexpr std::array<const char*, 6> names{"OMPI_COMM_WORLD_SIZE",
                                                    "OMPI_COMM_WORLD_RANK",
                                                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                    "PMI_SIZE",
                                                    "PMI_RANK",
                                                    "PMIX_RANK"};
  launcher_variables() {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (const char* v = std::getenv(names[i])) saved_[i] = v;
      ::unsetenv(names[i]);
    }
  }
  ~launcher_variables() {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (saved_[i]) {
        ::setenv(names[i], saved_[i]->c_str(), 1);
      } else {
        ::unsetenv(names[i]);
      }
    }
  }
  launcher_variables(const launcher_variables&) = delete;
  launcher_variables& operator=(const launcher_variables&) = delete;
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }

 private:
  std::array<std::optional<std::string>, names.size()> saved_;
};

// The config_error launcher_environment() throws, or "" when it accepts the environment.
std::string launcher_error() {
  try {
    (void)launcher_environment();
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

TEST(launcher_environment, ReadsEachLauncherFamily) {
  const launcher_variables env;
  EXPECT_FALSE(launcher_environment().has_value());
  launcher_variables::set("PMIX_RANK", "2");
  std::optional<launcher_ranks> l = launcher_environment();
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->rank, 2U);
  EXPECT_FALSE(l->size.has_value());
  EXPECT_TRUE(l->many()) << "PMIx gives the size through MPI only: counts as many ranks";
  launcher_variables::set("PMI_SIZE", "3");
  launcher_variables::set("PMI_RANK", "1");
  l = launcher_environment();
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->rank, 1U);
  EXPECT_EQ(l->size, 3U);
  EXPECT_FALSE(l->local_size.has_value());
  // Open MPI's names win over the others it may set too.
  launcher_variables::set("OMPI_COMM_WORLD_SIZE", "1");
  launcher_variables::set("OMPI_COMM_WORLD_RANK", "0");
  launcher_variables::set("OMPI_COMM_WORLD_LOCAL_SIZE", "1");
  l = launcher_environment();
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->rank, 0U);
  EXPECT_EQ(l->size, 1U);
  EXPECT_EQ(l->local_size, 1U);
  EXPECT_FALSE(l->many());
}

// The placement zoe_launcher_ranks reports: consecutive ranks per node (communicator.hpp's rule),
// the whole world as one node where the local size does not divide it or is not given.
TEST(launcher_environment, PlacesTheRankOnItsNode) {
  const launcher_variables env;
  launcher_variables::set("OMPI_COMM_WORLD_SIZE", "6");
  launcher_variables::set("OMPI_COMM_WORLD_RANK", "5");
  launcher_variables::set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  launcher_ranks::placement p = launcher_environment()->place();
  EXPECT_EQ(p.ranks_per_node, 2U);
  EXPECT_EQ(p.node, 2U);
  EXPECT_EQ(p.local_rank, 1U);
  EXPECT_EQ(p.nodes, 3U);
  launcher_variables::set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");  // nodes of 4 and 2: no one size
  p = launcher_environment()->place();
  EXPECT_EQ(p.ranks_per_node, 6U);
  EXPECT_EQ(p.node, 0U);
  EXPECT_EQ(p.local_rank, 5U);
  EXPECT_EQ(p.nodes, 1U);
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  launcher_variables::set("PMIX_RANK", "1");  // no size before MPI starts: no placement
  EXPECT_THROW((void)launcher_environment()->place(), usage_error);
}

TEST(launcher_environment, NamesTheVariableOfAMalformedValue) {
  for (const char* garbage : {"", "four", "4x", "-1", " 4", "4294967296"}) {
    const launcher_variables env;
    launcher_variables::set("OMPI_COMM_WORLD_SIZE", garbage);
    launcher_variables::set("OMPI_COMM_WORLD_RANK", "0");
    EXPECT_THAT(launcher_error(), AllOf(HasSubstr("OMPI_COMM_WORLD_SIZE"), HasSubstr(str("'", garbage, "'"))));
  }
  const launcher_variables env;
  launcher_variables::set("PMI_SIZE", "4");
  launcher_variables::set("PMI_RANK", "x");
  EXPECT_THAT(launcher_error(), HasSubstr("PMI_RANK"));
  launcher_variables::set("PMI_RANK", "4");
  EXPECT_THAT(launcher_error(), AllOf(HasSubstr("PMI_RANK"), HasSubstr("PMI_SIZE"), HasSubstr("below the size")));
  ::unsetenv("PMI_SIZE");
  ::unsetenv("PMI_RANK");
  launcher_variables::set("PMIX_RANK", "one");
  EXPECT_THAT(launcher_error(), HasSubstr("PMIX_RANK"));
}

TEST(launcher_environment, RefusesASizeWithoutItsRank) {
  const launcher_variables env;
  launcher_variables::set("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_THAT(launcher_error(), AllOf(HasSubstr("OMPI_COMM_WORLD_SIZE"), HasSubstr("OMPI_COMM_WORLD_RANK")));
  // make_communicator's auto choice reads the same variables, so it fails alike instead of
  // guessing rank 0.
  auto dev = make_host_device(16 * MiB);
  EXPECT_THROW((void)make_communicator(*dev, comm_options{}), config_error);
}

// The mpi backend's exchanges run in host callbacks, which CUDA may serialise across streams: it
// refuses a GPU before touching MPI, naming the key and the backend to use instead.
TEST(make_communicator, MpiRefusesADeviceOtherThanTheHostNamingNccl) {
  testing::fake_device dev(make_host_device(16 * MiB));
  dev.report_kind(device_kind::cuda);
  comm_options options;
  options.backend = "mpi";
  try {
    (void)make_communicator(dev, options);
    ADD_FAILURE() << "mpi accepted a cuda device";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("zoe.comm.backend"), HasSubstr("use nccl")));
  }
}

}  // namespace
}  // namespace zoe::engine
