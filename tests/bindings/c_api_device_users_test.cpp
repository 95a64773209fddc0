// A device's users are counted from before a stream or an engine is built on it: zoe_device_destroy
// during a zoe_stream_create (or zoe_engine_create) on another thread is refused, never a free of
// the device under the build. The device is a fake whose stream creation holds until released, so
// the race is made deterministic, without sleeps.
#include <memory>
#include <thread>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device_objects.hpp"
#include "fake_device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/zoe.h"

namespace zoe::bindings {
namespace {

using ::testing::HasSubstr;

// A live device handle over a fake host device, and the fake to steer it.
struct fake_device_handle {
  fake_device_handle() {
    auto fake_owner = std::make_unique<testing::fake_device>(make_host_device(1U << 20));
    fake = fake_owner.get();
    auto made = std::make_unique<zoe_device>();
    made->dev = std::move(fake_owner);
    handle = adopt(std::move(made));
  }
  testing::fake_device* fake = nullptr;
  zoe_device* handle = nullptr;
};

TEST(device_users, DestroyDuringAStreamCreateIsRefusedAndTheStreamIsMade) {
  const fake_device_handle device;
  device.fake->hold_stream_creation();
  zoe_stream* stream = nullptr;
  zoe_status made = ZOE_ERROR_INTERNAL;
  std::thread maker([&] { made = zoe_stream_create(device.handle, &stream); });
  device.fake->wait_for_held_creations(1);

  // Checked before the build goes on: had the device been freed, the build would run on freed memory.
  EXPECT_EQ(zoe_device_destroy(device.handle), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("is still used by 1 streams and engines"));
  device.fake->release_stream_creation();
  maker.join();

  ASSERT_EQ(made, ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(zoe_stream_synchronize(stream), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(zoe_stream_destroy(stream), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(zoe_device_destroy(device.handle), ZOE_SUCCESS) << zoe_last_error();
}

// The engine's build takes its use the same way: until keep(), a use given up gives the count back.
TEST(device_users, AUseCountsFromItsStartAndABuildThatFailsGivesItBack) {
  const fake_device_handle device;
  {
    const device_use building(device.handle, "zoe_engine_desc.device");
    EXPECT_EQ(&building.device(), device.handle);
    EXPECT_EQ(zoe_device_destroy(device.handle), ZOE_ERROR_USAGE);
    EXPECT_THAT(zoe_last_error(), HasSubstr("is still used by 1 streams and engines"));
  }  // the build failed: never kept
  EXPECT_EQ(device.handle->users.load(), 0U);
  {
    device_use built(device.handle, "device");
    built.keep();
  }
  EXPECT_EQ(device.handle->users.load(), 1U);
  --device.handle->users;  // what the made stream's or engine's destroy does
  EXPECT_EQ(zoe_device_destroy(device.handle), ZOE_SUCCESS) << zoe_last_error();
}

TEST(device_users, NoUseOfADeviceThatIsNotLive) {
  try {
    const device_use use(nullptr, "zoe_engine_desc.device");
    FAIL() << "a use of NULL was counted";
  } catch (const usage_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("zoe_engine_desc.device is NULL"));
  }
  const fake_device_handle device;
  zoe_device* gone = device.handle;
  ASSERT_EQ(zoe_device_destroy(gone), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_THROW(const device_use use(gone, "device"), usage_error);
}

}  // namespace
}  // namespace zoe::bindings
