// NCCL loaded at run time: the real library (where installed) loads with every entry point the nccl
// backend calls; a missing library, a missing symbol and a too-old version are refused with a
// config_error naming zoe.comm.backend and what is wrong; and the nccl backend on the host device
// (or in a build without CUDA) refuses, saying it needs a CUDA device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "nccl_backend.hpp"
#include "nccl_library.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The message of the config_error `f` throws; records a failure and returns "" when it throws none.
template <typename F>
std::string config_message(F&& f) {
  try {
    f();
  } catch (const config_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a config_error";
  return {};
}

TEST(nccl_library, real_library_loads_with_every_entry_point) {
  std::unique_ptr<nccl::library> lib;
  try {
    lib = std::make_unique<nccl::library>(nccl::library::load());
  } catch (const config_error& e) {
    GTEST_SKIP() << nccl::library::default_path << " is not installed here: " << e.what();
  }
  const nccl::api& a = lib->entry();
  EXPECT_EQ(lib->path(), nccl::library::default_path);
  EXPECT_NE(a.get_version, nullptr);
  EXPECT_NE(a.get_error_string, nullptr);
  EXPECT_NE(a.get_unique_id, nullptr);
  EXPECT_NE(a.comm_init_rank, nullptr);
  EXPECT_NE(a.comm_destroy, nullptr);
  EXPECT_NE(a.comm_abort, nullptr);
  EXPECT_NE(a.comm_get_async_error, nullptr);
  EXPECT_NE(a.all_gather, nullptr);
  EXPECT_NE(a.reduce_scatter, nullptr);
  EXPECT_NE(a.all_reduce, nullptr);
  EXPECT_NE(a.broadcast, nullptr);
  EXPECT_NE(a.send, nullptr);
  EXPECT_NE(a.recv, nullptr);
  EXPECT_NE(a.group_start, nullptr);
  EXPECT_NE(a.group_end, nullptr);
  EXPECT_GE(lib->version(), nccl::min_version);
  EXPECT_THAT(lib->version_string(), ::testing::MatchesRegex("2\\.[0-9]+\\.[0-9]+"));
  if (lib->version() >= 21800) {
    EXPECT_TRUE(lib->has_split()) << "ncclCommSplit came with NCCL 2.18";
  }
  // Calls into the library through the resolved pointers, without a GPU.
  EXPECT_THAT(lib->error_string(nccl::result::invalid_argument), HasSubstr("NCCL result 4"));
  EXPECT_EQ(&nccl::process_library(), &nccl::process_library()) << "loaded once for the process";
}

TEST(nccl_library, a_library_that_does_not_exist_is_named) {
  const std::string path = "/nonexistent/zoe/libnccl.so.2";
  EXPECT_THAT(config_message([&] { (void)nccl::library::load(path); }),
              AllOf(HasSubstr("zoe.comm.backend"), HasSubstr("cannot load " + path)));
}

TEST(nccl_library, a_missing_symbol_is_named) {
  const std::string path = ZOE_NCCL_STUB_WITHOUT_SEND;
  EXPECT_THAT(config_message([&] { (void)nccl::library::load(path); }),
              AllOf(HasSubstr("zoe.comm.backend"), HasSubstr(path), HasSubstr("lacks the symbol ncclSend "),
                    Not(HasSubstr("ncclCommSplit")), Not(HasSubstr("ncclRecv"))));
}

TEST(nccl_library, ncclcommsplit_is_optional) {
  const nccl::library lib = nccl::library::load(ZOE_NCCL_STUB);
  EXPECT_FALSE(lib.has_split());
  EXPECT_EQ(lib.version(), 22809);
  EXPECT_EQ(lib.version_string(), "2.28.9");
  EXPECT_EQ(lib.error_string(nccl::result::system_error), "stub error (NCCL result 2)");
}

TEST(nccl_library, a_version_before_2_10_is_refused) {
  EXPECT_THAT(config_message([] { (void)nccl::library::load(ZOE_NCCL_STUB_OLD); }),
              AllOf(HasSubstr("zoe.comm.backend"), HasSubstr("is NCCL 2.9.3"), HasSubstr("2.10 or later")));
}

TEST(nccl_backend, needs_a_cuda_device) {
  const std::unique_ptr<device> host = make_host_device(std::uint64_t{64} << 20);
  EXPECT_FALSE(nccl_usable(*host));
  comm_options options;
  options.backend = "nccl";
  EXPECT_THAT(config_message([&] { (void)make_communicator(*host, options); }),
              AllOf(HasSubstr("zoe.comm.backend"), HasSubstr("nccl needs a CUDA device")));
  const std::unique_ptr<communicator> bootstrap = make_single_communicator(*host);
  EXPECT_THAT(config_message([&] { (void)make_nccl_communicator(*host, *bootstrap, options); }),
              AllOf(HasSubstr("zoe.comm.backend"), HasSubstr("nccl needs a CUDA device")));
}

}  // namespace
}  // namespace zoe::engine::detail
