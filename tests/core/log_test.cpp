#include <gtest/gtest.h>

#include "zoe/core/log.hpp"

namespace zoe {
namespace {

TEST(log, WarnOnceWritesOnlyTheFirstTime) {
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(log::warn_once("log_test.key", "first"));
  EXPECT_FALSE(log::warn_once("log_test.key", "second"));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("zoe warning: first"), std::string::npos) << err;
  EXPECT_EQ(err.find("second"), std::string::npos) << err;
}

TEST(log, LevelFiltersMessages) {
  const auto saved = log::current_level();
  log::set_level(log::level::error);
  ::testing::internal::CaptureStderr();
  log::warn("hidden");
  log::error("shown");
  const std::string err = ::testing::internal::GetCapturedStderr();
  log::set_level(saved);
  EXPECT_EQ(err.find("hidden"), std::string::npos);
  EXPECT_NE(err.find("zoe error: shown"), std::string::npos);
}

}  // namespace
}  // namespace zoe
