#include <gtest/gtest.h>

#include <cerrno>

#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"

namespace zoe {
namespace {

TEST(error, EachClassCarriesItsCategory) {
  EXPECT_EQ(usage_error("x").category(), error_category::usage);
  EXPECT_EQ(config_error("x").category(), error_category::config);
  EXPECT_EQ(io_error("x", EIO).category(), error_category::io);
  EXPECT_EQ(corruption_error("x").category(), error_category::corrupt);
  EXPECT_EQ(memory_error("x").category(), error_category::memory);
  EXPECT_EQ(device_error("x").category(), error_category::device);
  EXPECT_EQ(comm_error("x").category(), error_category::comm);
  EXPECT_EQ(timeout_error("x").category(), error_category::timeout);
  EXPECT_EQ(internal_error("x").category(), error_category::internal);
  EXPECT_EQ(category_name(error_category::corrupt), "corrupt");
}

TEST(error, ExpectsBuildsMessageOnlyOnFailure) {
  int evaluated = 0;
  const auto costly = [&] {
    ++evaluated;
    return 5;
  };
  ZOE_EXPECTS(1 + 1 == 2, "never built ", costly());
  EXPECT_EQ(evaluated, 0);
  try {
    ZOE_EXPECTS(1 + 1 == 3, "queue_depth must be positive, got ", costly());
    FAIL();
  } catch (const usage_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what, "queue_depth must be positive, got 5");
  }
  EXPECT_EQ(evaluated, 1);
}

TEST(error, CheckErrnoKeepsTheErrnoAndItsText) {
  try {
    errno = ENOSPC;
    ZOE_CHECK_ERRNO(-1, "writing '/x'");
    FAIL();
  } catch (const io_error& e) {
    EXPECT_EQ(e.os_errno(), ENOSPC);
    EXPECT_NE(std::string(e.what()).find("writing '/x': No space left on device"), std::string::npos) << e.what();
  }
}

TEST(error, CheckNegErrnoTakesTheErrnoFromTheResultOnce) {
  int calls = 0;
  const auto returns = [&](int result) {
    ++calls;
    return result;
  };
  ZOE_CHECK_NEG_ERRNO(returns(0), "never built");
  ZOE_CHECK_NEG_ERRNO(returns(4096), "never built");
  EXPECT_EQ(calls, 2);
  errno = 0;
  try {
    ZOE_CHECK_NEG_ERRNO(returns(-EBADF), "io_uring_submit failed");
    FAIL();
  } catch (const io_error& e) {
    EXPECT_EQ(calls, 3);
    EXPECT_EQ(e.os_errno(), EBADF);
    const std::string what = e.what();
    EXPECT_NE(what.find("io_uring_submit failed: Bad file descriptor"), std::string::npos) << what;
    EXPECT_EQ(what.find("error_test.cpp"), std::string::npos) << what;
  }
}

// An error about the caller's input (a config key, a value, a file) is read by the user: the path
// of the file that raised it on the build machine means nothing there, so it stays out of the
// message and goes to the debug log.
TEST(error, ErrorsAboutUserInputCarryNoSourcePath) {
  try {
    ZOE_CHECK(1 + 1 == 3, config_error, "fp16.hysteresis must be >= 1, got ", 0);
    FAIL();
  } catch (const config_error& e) {
    EXPECT_EQ(std::string(e.what()), "fp16.hysteresis must be >= 1, got 0");
  }
  try {
    errno = ENOSPC;
    ZOE_CHECK_ERRNO(-1, "writing '/x'");
    FAIL();
  } catch (const io_error& e) {
    EXPECT_EQ(std::string(e.what()).find("error_test.cpp"), std::string::npos) << e.what();
  }
}

// A broken invariant is zoe's own bug: the location is what a report from the field needs.
TEST(error, InternalErrorsKeepTheSourceLocation) {
  try {
    ZOE_ASSERT(1 + 1 == 3);
    FAIL();
  } catch (const internal_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("internal invariant failed: 1 + 1 == 3"), std::string::npos) << what;
    EXPECT_NE(what.find("error_test.cpp:"), std::string::npos) << what;
  }
}

TEST(error, TheDebugLogNamesWhereAUserErrorWasRaised) {
  const log::level before = log::current_level();
  log::set_level(log::level::debug);
  ::testing::internal::CaptureStderr();
  try {
    ZOE_CHECK(1 + 1 == 3, config_error, "zoe.numa: bad");
  } catch (const config_error&) {  // NOLINT(bugprone-empty-catch): only the log line is checked
  }
  const std::string logged = ::testing::internal::GetCapturedStderr();
  log::set_level(before);
  EXPECT_NE(logged.find("error_test.cpp:"), std::string::npos) << logged;
  EXPECT_NE(logged.find("zoe.numa: bad"), std::string::npos) << logged;
}

TEST(error, AllDeriveFromZoeError) {
  EXPECT_THROW(throw corruption_error("bad"), error);
  EXPECT_THROW(throw io_error("bad", 0), std::runtime_error);
}

}  // namespace
}  // namespace zoe
