// Lent bounce memory on every backend: with a provider set, the engine's bounce buffers and the
// swap channel's partial-read scratch all come from it and go back to it unchanged, data stays
// byte-exact, and a provider with nothing to lend fails the request, naming the size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend_types.hpp"
#include "io_test_support.hpp"
#include "swap_store_support.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/bounce_memory.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/io_engine.hpp"

namespace zoe::testing {
namespace {

using io::io_completion;
using io::io_op;
using io::io_request;

/// A stand-in for a pinned buffer pool: a few fixed slots of one arena, each larger than asked
/// (as a pool's buffers are), with every call counted and every span given back checked.
class counting_bounce_memory final : public io::bounce_memory {
 public:
  counting_bounce_memory(std::size_t slots, std::size_t slot_bytes)
      : arena_(slots * slot_bytes), slot_bytes_(slot_bytes), free_(slots) {
    for (std::size_t i = 0; i < slots; ++i) free_[i] = slots - 1 - i;
  }

  std::span<std::byte> lend(std::size_t bytes, std::size_t alignment) noexcept override {
    const std::lock_guard lock(mutex_);
    ++lends_;
    if (refuse_ || free_.empty() || bytes > slot_bytes_ || slot_bytes_ % alignment != 0) return {};
    const std::size_t slot = free_.back();
    free_.pop_back();
    return {arena_.data() + slot * slot_bytes_, slot_bytes_};
  }

  void take_back(std::span<std::byte> memory) noexcept override {
    const std::lock_guard lock(mutex_);
    ++take_backs_;
    const auto at = static_cast<std::size_t>(memory.data() - arena_.data());
    if (memory.size() != slot_bytes_ || at % slot_bytes_ != 0 || at >= arena_.size()) {
      ++bad_take_backs_;
      return;
    }
    free_.push_back(at / slot_bytes_);
  }

  void refuse(bool r) {
    const std::lock_guard lock(mutex_);
    refuse_ = r;
  }
  [[nodiscard]] std::size_t lends() const {
    const std::lock_guard lock(mutex_);
    return lends_;
  }
  [[nodiscard]] std::size_t take_backs() const {
    const std::lock_guard lock(mutex_);
    return take_backs_;
  }
  [[nodiscard]] std::size_t bad_take_backs() const {
    const std::lock_guard lock(mutex_);
    return bad_take_backs_;
  }

 private:
  aligned_buffer arena_;
  std::size_t slot_bytes_;
  mutable std::mutex mutex_;
  std::vector<std::size_t> free_;
  std::size_t lends_ = 0;
  std::size_t take_backs_ = 0;
  std::size_t bad_take_backs_ = 0;
  bool refuse_ = false;
};

constexpr std::size_t block = 64 * KiB;

template <typename Backend>
class bounce_memory_test : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.bounce = provider_;
    try {
      engine_ = std::make_unique<io::io_engine>(Backend::make(options_), options_);
    } catch (const std::exception& e) {
      GTEST_SKIP() << e.what();
    }
    file_ = std::make_unique<io::file>(dir_ / "f.dat", io::open_mode::read_write, io::file_options{.create = true});
  }

  io_completion one(io_op op, std::span<std::byte> buffer, std::uint64_t offset) {
    engine_->submit({op, file_.get(), buffer, offset, 1});
    std::vector<io_completion> done;
    engine_->wait(done, 1);
    return done.at(0);
  }

  std::shared_ptr<counting_bounce_memory> provider_ = std::make_shared<counting_bounce_memory>(8, 2 * block);
  io::engine_options options_{.block_size = block, .queue_depth = 4};
  scratch_dir dir_;
  std::unique_ptr<io::io_engine> engine_;
  std::unique_ptr<io::file> file_;
};

TYPED_TEST_SUITE(bounce_memory_test, raw_backend_types, backend_type_names);

TYPED_TEST(bounce_memory_test, EveryBounceBufferComesFromTheProviderAndGoesBack) {
  // Direct I/O bounces exactly one piece for a write or read inside one block; buffered I/O none.
  const std::size_t per_piece = this->file_->direct() ? 1 : 0;
  auto small = random_bytes(100, 1);
  ASSERT_TRUE(this->one(io_op::write, small, 10).ok());
  EXPECT_EQ(this->provider_->lends(), per_piece) << "the read-modify-write of the partial block";
  std::vector<std::byte> back(100);
  ASSERT_TRUE(this->one(io_op::read, back, 10).ok());
  EXPECT_EQ(this->provider_->lends(), 2 * per_piece) << "the bounce read of the partial block";
  EXPECT_TRUE(same_bytes(back, small));

  // Larger and unaligned everywhere: head, tail and (from an unaligned address) every piece.
  for (const std::size_t shift : {std::size_t{0}, std::size_t{3}}) {
    auto data = random_bytes(3 * block + 77, 2 + shift);
    aligned_buffer out(data.size() + shift);
    std::memcpy(out.data() + shift, data.data(), data.size());
    ASSERT_TRUE(this->one(io_op::write, out.span().subspan(shift, data.size()), 4093).ok());
    aligned_buffer in(data.size() + shift);
    ASSERT_TRUE(this->one(io_op::read, in.span().subspan(shift, data.size()), 4093).ok());
    EXPECT_TRUE(same_bytes(in.span().subspan(shift, data.size()), data)) << "shift " << shift;
  }
  if (this->file_->direct()) {
    EXPECT_GT(this->provider_->lends(), 2u);
  }
  EXPECT_EQ(this->provider_->take_backs(), this->provider_->lends()) << "every lent span came back";
  EXPECT_EQ(this->provider_->bad_take_backs(), 0u) << "a span came back changed or was never lent";
}

TYPED_TEST(bounce_memory_test, AProviderWithNothingToLendFailsTheRequestNamingTheSize) {
  if (!this->file_->direct()) GTEST_SKIP() << "buffered I/O needs no bounce buffers";
  const auto before = random_bytes(8 * KiB, 3);
  write_whole_file(this->dir_ / "f.dat", before);
  this->provider_->refuse(true);
  auto small = random_bytes(100, 4);
  const io_completion w = this->one(io_op::write, small, 10);
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.os_errno, ENOMEM);
  EXPECT_NE(w.message.find(std::to_string(block) + "-byte I/O bounce buffer"), std::string::npos) << w.message;
  EXPECT_NE(w.message.find("f.dat"), std::string::npos) << w.message;
  EXPECT_TRUE(same_bytes(read_whole_file(this->dir_ / "f.dat"), before)) << "a refused write changed the file";
  std::vector<std::byte> back(100);
  EXPECT_EQ(this->one(io_op::read, back, 10).os_errno, ENOMEM);

  this->provider_->refuse(false);
  ASSERT_TRUE(this->one(io_op::write, small, 10).ok()) << "the engine goes on once memory is lent again";
  ASSERT_TRUE(this->one(io_op::read, back, 10).ok());
  EXPECT_TRUE(same_bytes(back, small));
}

template <typename Backend>
class swap_scratch_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto refusal = backend_refusal(Backend::name)) GTEST_SKIP() << *refusal;
  }
  scratch_dir dir_;
  std::shared_ptr<counting_bounce_memory> provider_ = std::make_shared<counting_bounce_memory>(4, 2 * store_chunk);
};

TYPED_TEST_SUITE(swap_scratch_test, raw_backend_types, backend_type_names);

TYPED_TEST(swap_scratch_test, PartialReadsVerifyInLentScratch) {
  auto o = store_options({this->dir_.path()}, 32 * store_chunk, TypeParam::name);
  o.io.bounce = this->provider_;
  io::swap_store store(std::move(o));
  io::swap_channel ch(store);
  const io::swap_extent e = store.allocate(6 * store_chunk);  // whole blocks: the engines never bounce
  // 4 KiB-aligned caller memory, so the engines send it straight to the files and only the
  // channel's scratch is lent.
  aligned_buffer data(e.bytes);
  const auto bytes = random_bytes(e.bytes, 5);
  std::memcpy(data.data(), bytes.data(), bytes.size());
  store_write(ch, e, 0, data.span());
  EXPECT_EQ(this->provider_->lends(), 0u) << "whole chunks from aligned memory need no scratch";

  aligned_buffer part(2 * store_chunk);
  ASSERT_TRUE(store_read(ch, e, 4096, part.span()).ok());  // starts and ends inside a chunk
  EXPECT_EQ(this->provider_->lends(), 1u) << "one scratch per partial read";
  EXPECT_TRUE(same_bytes(part.span(), std::span(bytes).subspan(4096, part.size())));
  EXPECT_EQ(this->provider_->take_backs(), 1u);

  this->provider_->refuse(true);
  const auto refused = store_read(ch, e, 4096, part.span());
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message.find("scratch memory"), std::string::npos) << refused.message;
  EXPECT_NE(refused.message.find("swap extent " + std::to_string(e.id)), std::string::npos) << refused.message;
  this->provider_->refuse(false);
  EXPECT_EQ(this->provider_->take_backs(), this->provider_->lends() - 1) << "the refused lend lent nothing";
  EXPECT_EQ(this->provider_->bad_take_backs(), 0u);
}

}  // namespace
}  // namespace zoe::testing
