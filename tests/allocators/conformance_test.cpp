// The typed conformance suite: every allocator passes the same cases unchanged.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "allocator_types.hpp"
#include "zoe/allocators/poison.hpp"

namespace zoe::testing {
namespace {

template <typename T>
class allocator_conformance : public ::testing::Test {
 protected:
  typename T::rig rig_;
};

TYPED_TEST_SUITE(allocator_conformance, allocator_types, allocator_type_names);

TYPED_TEST(allocator_conformance, AllocationsAreAlignedAndLargeEnough) {
  for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{100}, std::size_t{4097}, TypeParam::unit}) {
    auto a = TypeParam::try_allocate(this->rig_, n);
    ASSERT_TRUE(a.has_value()) << n << " bytes";
    const auto span = TypeParam::bytes(*a);
    ASSERT_GE(span.size(), n);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(span.data()) % TypeParam::alignment, 0U) << n << " bytes";
    std::memset(span.data(), 0x7e, n);  // writable to the last byte
  }
}

TYPED_TEST(allocator_conformance, ZeroSizeSucceedsAndCostsNothing) {
  std::vector<typename TypeParam::allocation> held;
  auto z = TypeParam::try_allocate(this->rig_, 0);
  ASSERT_TRUE(z.has_value());
  // While a zero-size allocation is held, the whole capacity is still there.
  for (std::size_t i = 0; i < units; ++i) {
    auto a = TypeParam::try_allocate(this->rig_, TypeParam::unit);
    ASSERT_TRUE(a.has_value()) << "unit " << i;
    held.push_back(std::move(*a));
  }
}

TYPED_TEST(allocator_conformance, ExhaustionFailsCleanlyAndRecovers) {
  std::vector<typename TypeParam::allocation> held;
  while (auto a = TypeParam::try_allocate(this->rig_, TypeParam::unit)) {
    held.push_back(std::move(*a));
    ASSERT_LE(held.size(), units) << "handed out more than its capacity";
  }
  EXPECT_EQ(held.size(), units);
  EXPECT_FALSE(TypeParam::try_allocate(this->rig_, TypeParam::unit).has_value());
  held.erase(held.begin() + 3);
  auto again = TypeParam::try_allocate(this->rig_, TypeParam::unit);
  ASSERT_TRUE(again.has_value()) << "a freed unit must be available again";
}

TYPED_TEST(allocator_conformance, ManyThreadsNeverShareMemory) {
  constexpr int threads = 4;
  constexpr int rounds = 300;
  std::atomic<int> corrupted{0};
  std::atomic<int> granted{0};
  std::vector<std::jthread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::vector<std::pair<typename TypeParam::allocation, std::size_t>> mine;
      for (int r = 0; r < rounds; ++r) {
        const std::size_t n = 1 + rng() % TypeParam::unit;
        if (auto a = TypeParam::try_allocate(this->rig_, n)) {
          ++granted;
          std::memset(TypeParam::bytes(*a).data(), t + 1, n);
          mine.emplace_back(std::move(*a), n);
        }
        if (mine.size() > 3 || (!mine.empty() && rng() % 2 == 0)) {
          const auto& [held, size] = mine.front();
          const auto* bytes = reinterpret_cast<const unsigned char*>(TypeParam::bytes(held).data());
          for (std::size_t i = 0; i < size; ++i) {
            if (bytes[i] != t + 1) {
              ++corrupted;
              break;
            }
          }
          mine.erase(mine.begin());
        }
        std::this_thread::yield();
      }
    });
  }
  pool.clear();
  EXPECT_EQ(corrupted.load(), 0) << "another thread wrote into memory held by this one";
  EXPECT_GT(granted.load(), threads * rounds / 4);
}

TYPED_TEST(allocator_conformance, FreedMemoryIsPoisonedInDebugBuilds) {
  if (!allocators::poisons_freed_memory()) GTEST_SKIP() << "release build: freed memory is not poisoned";
  if (!TypeParam::keeps_freed_memory) GTEST_SKIP() << "freed memory returns to the OS and cannot be read";
  std::byte* where = nullptr;
  std::size_t n = 0;
  {
    auto a = TypeParam::try_allocate(this->rig_, 1000);
    ASSERT_TRUE(a.has_value());
    const auto span = TypeParam::bytes(*a);
    where = span.data();
    n = 1000;
    std::memset(where, 0x11, n);
  }
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(static_cast<unsigned char>(where[i]), allocators::poison_byte) << "byte " << i;
  }
}

}  // namespace
}  // namespace zoe::testing
