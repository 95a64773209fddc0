// Activation checkpoints on the host device: bit-exact round trips through the pinned host share
// and through NVMe when it is full, reverse-order prefetch within its device share, any load order,
// the device budget, a failing NVMe write and a corrupt NVMe copy, bad input, the config keys and
// plan items, and the engine clearing the store at the end of a micro-batch.
#include "zoe/engine/activations/activation_store.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "swap_store_support.hpp"
#include "usage_message.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/config/parse.hpp"
#include "zoe/engine/engine.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/placement.hpp"

namespace zoe::testing {
namespace {

using engine::activation_id;
using engine::activation_store;
using engine::activation_store_options;

// A host device, its pinned memory and, with nvme_bytes, a swap store in a scratch folder (over
// the fault-injecting backend, which passes everything through until a test adds a rule).
struct rig {
  explicit rig(activation_store_options o, std::uint64_t budget = 64 * MiB)
      : dev(make_host_device(budget)), pinned(*dev), faults(std::make_shared<fault_plan>()) {
    if (o.nvme_bytes > 0) {
      io::swap_store_options so = store_options({dir.path()}, round_up(o.nvme_bytes, store_chunk));
      so.wrap_backend = [f = faults](std::unique_ptr<io::io_backend> inner) {
        return std::unique_ptr<io::io_backend>(std::make_unique<fault_injecting_backend>(std::move(inner), f));
      };
      store = std::make_unique<io::swap_store>(std::move(so));
      if (o.staging_bytes == 0) o.staging_bytes = 2 * store_chunk;
    }
    movers = std::make_unique<engine::mover>(store.get(), nullptr, dev.get(), engine::mover_options{});
    acts = std::make_unique<activation_store>(*dev, pinned, movers.get(), o);
  }
  ~rig() { acts.reset(); }
  rig(const rig&) = delete;
  rig& operator=(const rig&) = delete;

  // Device memory holding `data`.
  void* on_device(const std::vector<std::byte>& data) {
    void* p = dev->allocate(data.size(), s.view());
    dev->copy_async(p, data.data(), data.size(), copy_kind::host_to_device, s.view());
    dev->synchronize(s.view());
    return p;
  }
  // Saves `data` from device memory, then scribbles over and frees that memory in stream order
  // (what the caller may do at once after save).
  activation_id save(const std::vector<std::byte>& data) {
    void* p = on_device(data);
    const activation_id id = acts->save(p, data.size(), s.view());
    dev->memset_async(p, 0xAB, data.size(), s.view());
    dev->deallocate(p, data.size(), s.view());
    return id;
  }
  std::vector<std::byte> back(const void* p, std::size_t n) {
    std::vector<std::byte> out(n);
    dev->copy_async(out.data(), p, n, copy_kind::device_to_host, s.view());
    dev->synchronize(s.view());
    return out;
  }
  // Loads `id`, checks its bytes against `want`, frees it.
  ::testing::AssertionResult load_matches(activation_id id, const std::vector<std::byte>& want) {
    const void* p = acts->load(id, s.view());
    auto result = same_bytes(back(p, want.size()), want);
    acts->free(id, s.view());
    return result;
  }

  scratch_dir dir;
  std::unique_ptr<device> dev;
  allocators::pinned_host_resource pinned;
  std::shared_ptr<fault_plan> faults;
  std::unique_ptr<io::swap_store> store;
  std::unique_ptr<engine::mover> movers;
  device_stream s = dev->create_stream();
  std::unique_ptr<activation_store> acts;
};

std::vector<std::vector<std::byte>> payloads(const std::vector<std::size_t>& sizes, std::uint64_t seed) {
  std::vector<std::vector<std::byte>> out;
  for (std::size_t i = 0; i < sizes.size(); ++i) out.push_back(random_bytes(sizes[i], seed + i));
  return out;
}

TEST(activation_store, RoundTripThroughTheHostShareIsBitExact) {
  rig r({.host_bytes = 1 * MiB});
  const auto data = payloads({1000, 64 * KiB, 3, 200 * KiB + 7}, 1);
  std::vector<activation_id> ids;
  for (const auto& d : data) ids.push_back(r.save(d));
  EXPECT_EQ(r.acts->size(), data.size());
  for (std::size_t i = ids.size(); i-- > 0;) EXPECT_TRUE(r.load_matches(ids[i], data[i])) << i;
  EXPECT_EQ(r.acts->size(), 0U);
  const engine::activation_stats st = r.acts->stats();
  EXPECT_EQ(st.saves, data.size());
  EXPECT_EQ(st.loads, data.size());
  EXPECT_EQ(st.bytes_to_host, 1000U + 64 * KiB + 3 + 200 * KiB + 7);
  EXPECT_EQ(st.bytes_to_device, st.bytes_to_host);
  EXPECT_EQ(st.bytes_written, 0U);
  EXPECT_GE(st.peak_host_bytes, st.bytes_to_host);
  EXPECT_LE(st.peak_host_bytes, 1 * MiB);
  EXPECT_LE(r.pinned.peak_bytes_in_use(), 1 * MiB);
}

TEST(activation_store, TheSlotsOfFreedActivationsAreReused) {
  rig r({.host_bytes = 128 * KiB});
  for (std::uint64_t round = 0; round < 6; ++round) {
    const auto data = payloads({60 * KiB, 60 * KiB}, 10 * round);
    const activation_id a = r.save(data[0]);
    const activation_id b = r.save(data[1]);
    EXPECT_TRUE(r.load_matches(b, data[1]));
    EXPECT_TRUE(r.load_matches(a, data[0]));
  }
  EXPECT_LE(r.acts->stats().peak_host_bytes, 128 * KiB);
}

TEST(activation_store, WhatOverflowsTheHostShareGoesToNvmeAndComesBackBitExact) {
  // 64 KiB of host share: the first fits, the rest go to NVMe (one of them in several staging pieces).
  rig r({.host_bytes = 64 * KiB, .nvme_bytes = 2 * MiB});
  const auto data = payloads({48 * KiB, 40 * KiB, 300 * KiB + 5, 10 * KiB}, 2);
  std::vector<activation_id> ids;
  for (const auto& d : data) ids.push_back(r.save(d));
  engine::activation_stats st = r.acts->stats();
  EXPECT_EQ(st.bytes_written, 40 * KiB + 300 * KiB + 5);
  EXPECT_EQ(st.peak_host_bytes, 48 * KiB + 10 * KiB);  // the last fits again beside the first
  EXPECT_EQ(st.bytes_to_host, 48 * KiB + 40 * KiB + 300 * KiB + 5 + 10 * KiB);
  EXPECT_GT(st.peak_nvme_bytes, 0U);
  EXPECT_LE(st.peak_nvme_bytes, 2 * MiB);
  // Mixed: host and NVMe ones, in reverse order.
  for (std::size_t i = ids.size(); i-- > 0;) EXPECT_TRUE(r.load_matches(ids[i], data[i])) << i;
  st = r.acts->stats();
  EXPECT_EQ(st.bytes_read, st.bytes_written);
  EXPECT_EQ(st.bytes_to_device, st.bytes_to_host);
  EXPECT_EQ(r.store->free_bytes(), r.store->capacity()) << "every extent went back";
}

TEST(activation_store, ReverseOrderLoadsArePrefetchedWithinTheDeviceShare) {
  rig r({.host_bytes = 1 * MiB, .prefetch_bytes = 96 * KiB});
  const auto data = payloads(std::vector<std::size_t>(8, 32 * KiB), 3);
  std::vector<activation_id> ids;
  for (const auto& d : data) ids.push_back(r.save(d));
  const std::uint64_t before = r.dev->usage().current_bytes;
  for (std::size_t i = ids.size(); i-- > 0;) {
    const void* p = r.acts->load(ids[i], r.s.view());
    // The loaded one, and at most prefetch_bytes ahead of it.
    EXPECT_LE(r.dev->usage().current_bytes, before + 32 * KiB + 96 * KiB);
    EXPECT_TRUE(same_bytes(r.back(p, data[i].size()), data[i])) << i;
    r.acts->free(ids[i], r.s.view());
    r.dev->synchronize(r.s.view());  // the free runs in stream order: its bytes count until it has
  }
  // Every load but the first found its bytes prefetched.
  EXPECT_EQ(r.acts->stats().prefetch_hits, ids.size() - 1);
}

TEST(activation_store, AnyLoadOrderIsCorrect) {
  rig r({.host_bytes = 256 * KiB, .prefetch_bytes = 64 * KiB, .nvme_bytes = 1 * MiB});
  const auto data = payloads({30 * KiB, 70 * KiB, 20 * KiB, 90 * KiB, 50 * KiB, 100 * KiB, 8 * KiB}, 4);
  std::vector<activation_id> ids;
  for (const auto& d : data) ids.push_back(r.save(d));
  EXPECT_GT(r.acts->stats().bytes_written, 0U) << "some went to NVMe";
  // Forward order, then a prefetched one freed without a load, then the rest out of order.
  EXPECT_TRUE(r.load_matches(ids[0], data[0]));
  EXPECT_TRUE(r.load_matches(ids[1], data[1]));
  EXPECT_TRUE(r.load_matches(ids[4], data[4]));  // prefetches what was saved before it
  r.acts->free(ids[3], r.s.view());
  EXPECT_TRUE(r.load_matches(ids[6], data[6]));
  EXPECT_TRUE(r.load_matches(ids[2], data[2]));
  EXPECT_TRUE(r.load_matches(ids[5], data[5]));
  EXPECT_EQ(r.acts->size(), 0U);
  r.dev->synchronize();  // prefetched memory is freed in order with the store's prefetch stream
  EXPECT_EQ(r.dev->usage().current_bytes, 0U) << "no device memory left behind";
}

TEST(activation_store, PrefetchStaysWithinTheDeviceBudget) {
  // The device share asks for more than the budget leaves: prefetch stops where the budget does,
  // and a load takes the memory back from prefetched ones when it needs it.
  constexpr std::uint64_t budget = 160 * KiB;
  rig r({.host_bytes = 1 * MiB, .prefetch_bytes = 1 * MiB}, budget);
  const auto data = payloads(std::vector<std::size_t>(8, 32 * KiB), 5);
  std::vector<activation_id> ids;
  for (const auto& d : data) ids.push_back(r.save(d));
  EXPECT_TRUE(r.load_matches(ids[7], data[7]));
  EXPECT_TRUE(r.load_matches(ids[1], data[1]));  // not prefetched: room is made for it
  for (std::size_t i = 7; i-- > 0;) {
    if (i != 1) {
      EXPECT_TRUE(r.load_matches(ids[i], data[i])) << i;
    }
  }
  EXPECT_LE(r.dev->usage().peak_bytes, budget);
  EXPECT_GT(r.acts->stats().prefetch_hits, 0U);
}

TEST(activation_store, AFailingNvmeWriteSavesNothingAndNamesTheSwapFolder) {
  rig r({.host_bytes = 0, .nvme_bytes = 1 * MiB});
  r.faults->add({.op = io::io_op::write, .inject_errno = EIO});
  const auto data = payloads({100 * KiB}, 6);
  void* p = r.on_device(data[0]);
  try {
    (void)r.acts->save(p, data[0].size(), r.s.view());
    ADD_FAILURE() << "expected an io_error";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find(r.dir.path().string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(r.acts->size(), 0U);
  EXPECT_EQ(r.store->free_bytes(), r.store->capacity()) << "the extent went back";
  EXPECT_TRUE(same_bytes(r.back(p, data[0].size()), data[0])) << "the caller's buffer is intact";
  // The rule fired once: the same bytes save and load now.
  const activation_id id = r.acts->save(p, data[0].size(), r.s.view());
  r.dev->deallocate(p, data[0].size(), r.s.view());
  EXPECT_TRUE(r.load_matches(id, data[0]));
}

TEST(activation_store, ACorruptNvmeCopyIsDetectedNeverRead) {
  rig r({.host_bytes = 0, .nvme_bytes = 1 * MiB});
  const auto data = payloads({150 * KiB}, 7);
  const activation_id id = r.save(data[0]);
  flip_byte(only_swap_file(*r.store), store_chunk + 99);
  try {
    (void)r.acts->load(id, r.s.view());
    ADD_FAILURE() << "expected a corruption_error";
  } catch (const corruption_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(r.dir.path().string()), std::string::npos) << m;
    EXPECT_NE(m.find("activation " + std::to_string(id)), std::string::npos) << m;
    EXPECT_NE(m.find("at offset " + std::to_string(store_chunk)), std::string::npos) << m;
  }
  r.dev->synchronize(r.s.view());  // the failed load's memory is freed in order with its stream
  EXPECT_EQ(r.dev->usage().current_bytes, 0U) << "the failed load's device memory went back";
  r.acts->free(id, r.s.view());
  EXPECT_EQ(r.store->free_bytes(), r.store->capacity());
}

TEST(activation_store, WithoutRoomASaveNamesTheKeys) {
  rig r({.host_bytes = 64 * KiB});
  const auto data = payloads({48 * KiB, 48 * KiB}, 8);
  (void)r.save(data[0]);
  void* p = r.on_device(data[1]);
  try {
    (void)r.acts->save(p, data[1].size(), r.s.view());
    ADD_FAILURE() << "expected a memory_error";
  } catch (const memory_error& e) {
    EXPECT_NE(std::string(e.what()).find("zoe.activations.host_bytes"), std::string::npos) << e.what();
  }
  r.dev->deallocate(p, data[1].size(), r.s.view());
  rig n({.host_bytes = 0, .nvme_bytes = 64 * KiB});
  (void)n.save(data[0]);
  p = n.on_device(data[1]);
  try {
    (void)n.acts->save(p, data[1].size(), n.s.view());
    ADD_FAILURE() << "expected a memory_error";
  } catch (const memory_error& e) {
    EXPECT_NE(std::string(e.what()).find("zoe.activations.nvme_bytes"), std::string::npos) << e.what();
  }
  n.dev->deallocate(p, data[1].size(), n.s.view());
}

TEST(activation_store, BadInputNamesTheActivation) {
  rig r({.host_bytes = 64 * KiB});
  const auto data = payloads({1 * KiB}, 9);
  void* p = r.on_device(data[0]);
  EXPECT_NE(usage_message([&] { (void)r.acts->save(nullptr, 16, r.s.view()); }).find("null"), std::string::npos);
  EXPECT_NE(usage_message([&] { (void)r.acts->save(p, 0, r.s.view()); }).find("zero bytes"), std::string::npos);
  const activation_id id = r.acts->save(p, data[0].size(), r.s.view());
  r.dev->deallocate(p, data[0].size(), r.s.view());
  const std::string unknown = "activation " + std::to_string(id + 41);
  EXPECT_NE(usage_message([&] { (void)r.acts->load(id + 41, r.s.view()); }).find(unknown), std::string::npos);
  EXPECT_NE(usage_message([&] { r.acts->free(id + 41, r.s.view()); }).find(unknown), std::string::npos);
  (void)r.acts->load(id, r.s.view());
  const std::string named = "activation " + std::to_string(id);
  EXPECT_NE(usage_message([&] { (void)r.acts->load(id, r.s.view()); }).find(named + " is already loaded"),
            std::string::npos);
  r.acts->free(id, r.s.view());
  EXPECT_NE(usage_message([&] { r.acts->free(id, r.s.view()); }).find(named), std::string::npos);
  EXPECT_NE(usage_message([&] { (void)r.acts->load(id, r.s.view()); }).find(named), std::string::npos);
}

TEST(activation_store, ClearFreesEverythingLoadedOrNot) {
  rig r({.host_bytes = 128 * KiB, .prefetch_bytes = 64 * KiB, .nvme_bytes = 512 * KiB});
  const auto data = payloads({40 * KiB, 40 * KiB, 40 * KiB, 100 * KiB}, 10);
  std::vector<activation_id> ids;
  for (const auto& d : data) ids.push_back(r.save(d));
  (void)r.acts->load(ids[2], r.s.view());  // loaded, and prefetches the two before it
  r.acts->clear();
  EXPECT_EQ(r.acts->size(), 0U);
  r.dev->synchronize();  // prefetched memory is freed in order with the store's prefetch stream
  EXPECT_EQ(r.dev->usage().current_bytes, 0U);
  EXPECT_EQ(r.store->free_bytes(), r.store->capacity());
  // The store works on after a clear.
  const activation_id id = r.save(data[3]);
  EXPECT_TRUE(r.load_matches(id, data[3]));
}

TEST(activation_config, KeysParseAndNameThemselves) {
  const auto c = engine::parse_config(
      R"({"zoe": {"activations": {"host_bytes": 1048576, "nvme_bytes": 2097152, "prefetch_bytes": 65536}}})");
  EXPECT_EQ(c.config.zoe.activations.host_bytes, 1 * MiB);
  EXPECT_EQ(c.config.zoe.activations.nvme_bytes, 2 * MiB);
  EXPECT_EQ(c.config.zoe.activations.prefetch_bytes, 64 * KiB);
  try {
    (void)engine::parse_config(R"({"zoe": {"activations": {"host_bytes": -1}}})");
    ADD_FAILURE() << "expected a config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("zoe.activations.host_bytes"), std::string::npos) << e.what();
  }
  try {
    (void)engine::parse_config(R"({"zoe": {"activations": {"nvme_bytes": 1e18}}})");
    ADD_FAILURE() << "expected a config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("zoe.activations.nvme_bytes"), std::string::npos) << e.what();
  }
  // DeepSpeed's own block stays a known key (read quietly).
  EXPECT_TRUE(engine::parse_config(R"({"activation_checkpointing": {"cpu_checkpointing": true}})").warnings.empty());
}

engine::model_layout tiny_layout() {
  return engine::model_layout({{"m", {{"m.w", {64, 64}, kernels::dtype::fp32}}}}, {});
}

TEST(activation_plan, TheSharesAreItemsNamingTheirKeys) {
  const engine::model_layout layout = tiny_layout();
  engine::engine_config c;
  c.aio.block_size = 64 * KiB;
  c.zoe.activations = {.host_bytes = 3 * MiB, .nvme_bytes = 100 * KiB, .prefetch_bytes = 1 * MiB};
  c.zoe.extra_swap_paths = {"/swap/a"};
  const auto plan = engine::make_footprint_plan(layout, c, engine::placement(layout, c));
  const auto item = [&](engine::memory_kind m, const std::string& key) -> std::optional<std::uint64_t> {
    for (const engine::plan_item& i : plan.items) {
      for (const std::string& k : i.keys) {
        if (i.memory == m && k == key) return i.bytes;
      }
    }
    return std::nullopt;
  };
  EXPECT_EQ(item(engine::memory_kind::pinned, "zoe.activations.host_bytes"), 3 * MiB);
  EXPECT_EQ(item(engine::memory_kind::device, "zoe.activations.prefetch_bytes"), 1 * MiB);
  EXPECT_EQ(item(engine::memory_kind::nvme, "zoe.activations.nvme_bytes"), 128 * KiB);  // whole chunks
  EXPECT_EQ(plan.activation_staging_bytes, 128 * KiB);  // never more than the NVMe share
  EXPECT_GE(plan.nvme_bytes, 128 * KiB) << "the store is made for the activations alone";
  EXPECT_EQ(plan.swap_paths.size(), 1U);
  // NVMe bytes with no swap folder: refused, naming the key.
  c.zoe.extra_swap_paths.clear();
  try {
    (void)engine::make_footprint_plan(layout, c, engine::placement(layout, c));
    ADD_FAILURE() << "expected a config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("zoe.activations.nvme_bytes"), std::string::npos) << e.what();
  }
}

TEST(activation_engine, EndMicroBatchClearsTheActivations) {
  scratch_dir dir;
  const auto dev = make_host_device(64 * MiB);
  engine::engine_config c;
  c.zero.stage = 3;
  c.aio.block_size = 64 * KiB;
  c.zoe.activations = {.host_bytes = 1 * MiB, .nvme_bytes = 1 * MiB, .prefetch_bytes = 64 * KiB};
  c.zoe.extra_swap_paths = {dir.path()};
  engine::offload_engine e({{"m", {{"m.w", {64, 64}, kernels::dtype::fp32}}}}, c, *dev);
  ASSERT_NE(e.resources().store(), nullptr) << "a store for the activations alone";
  e.set_parameter(0, std::vector<float>(64 * 64, 0.5F));
  const device_stream s = dev->create_stream();
  std::vector<std::byte> data = random_bytes(300 * KiB, 11);
  void* p = dev->allocate(data.size(), s.view());
  dev->copy_async(p, data.data(), data.size(), copy_kind::host_to_device, s.view());
  e.begin_micro_batch();
  std::vector<activation_id> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(e.activations().save(p, data.size(), s.view()));  // two on NVMe
  EXPECT_EQ(e.activations().size(), 5U);
  EXPECT_GT(e.activations().stats().bytes_written, 0U);
  (void)e.activations().load(ids.back(), s.view());
  e.fetch(0).wait();
  e.release(0, s.view());
  e.end_micro_batch();
  EXPECT_EQ(e.activations().size(), 0U);
  EXPECT_EQ(e.resources().store()->free_bytes(), e.resources().store()->capacity())
      << "the activations' extents went back";
  dev->deallocate(p, data.size(), s.view());
  dev->synchronize(s.view());
}

}  // namespace
}  // namespace zoe::testing
