// device_allocation: the one owner of a device allocation. It frees exactly once, whoever holds it
// after moves, and a failed allocation leaves nothing behind.
#include <gtest/gtest.h>

#include <utility>

#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe {
namespace {

TEST(device_allocation, FreesOnceWhoeverHoldsItAfterMoves) {
  const auto dev = make_host_device(4 * MiB);
  {
    device_allocation a(*dev, 1 * MiB);
    ASSERT_NE(a.data(), nullptr);
    EXPECT_EQ(a.size(), 1 * MiB);
    EXPECT_EQ(a.span().size(), 1 * MiB);
    EXPECT_EQ(a.as<float>(), static_cast<void*>(a.data()));
    EXPECT_EQ(dev->usage().current_bytes, 1 * MiB);

    device_allocation b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from owns nothing
    EXPECT_EQ(a.size(), 0U);       // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.size(), 1 * MiB);

    device_allocation c(*dev, 2 * MiB);
    EXPECT_EQ(dev->usage().current_bytes, 3 * MiB);
    c = std::move(b);  // c's 2 MiB are freed, b's 1 MiB now c's
    EXPECT_EQ(dev->usage().current_bytes, 1 * MiB);
    EXPECT_EQ(c.size(), 1 * MiB);
  }
  EXPECT_EQ(dev->usage().current_bytes, 0U);
}

TEST(device_allocation, EmptyAndZeroBytesOwnNothing) {
  const auto dev = make_host_device(1 * MiB);
  const device_allocation none;
  EXPECT_EQ(none.data(), nullptr);
  const device_allocation zero(*dev, 0);
  EXPECT_EQ(zero.data(), nullptr);
  EXPECT_EQ(zero.size(), 0U);
  EXPECT_EQ(dev->usage().current_bytes, 0U);
}

TEST(device_allocation, OverBudgetThrowsAndHoldsNothing) {
  const auto dev = make_host_device(1 * MiB);
  EXPECT_THROW(device_allocation(*dev, 2 * MiB), memory_error);
  EXPECT_EQ(dev->usage().current_bytes, 0U);
}

}  // namespace
}  // namespace zoe
