// Checkpoint client data through the C API: the caller's opaque blob saved with the checkpoint
// (zoe_checkpoint_save_client) comes back from the load (zoe_checkpoint_client) byte for byte, a
// torn or changed blob is refused naming client.bin with nothing changed, and the per-group
// settings a checkpoint kept are given back (zoe_checkpoint_groups), or, from a checkpoint saved
// before they were kept, the single rate it kept for every group.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "c_api_rig.hpp"
#include "zoe/zoe.h"

namespace zoe::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<c_module> two_modules = {{"layer0", {{"layer0.w", {37, 53}, ZOE_BF16}, {"layer0.b", {53}}}},
                                           {"layer1", {{"layer1.w", {53, 29}}, {"layer1.b", {29}, ZOE_BF16}}}};

// Every byte value, NULs included: the blob is bytes, not text.
std::vector<unsigned char> blob(std::size_t n) {
  std::vector<unsigned char> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>((i * 7 + 3) % 256);
  return out;
}

void save_with(const c_rig& r, const char* tag, const std::vector<unsigned char>& client) {
  ASSERT_EQ(zoe_checkpoint_save_client(r.engine(), r.dir().c_str(), tag, client.data(), client.size()), ZOE_SUCCESS)
      << zoe_last_error();
}

void one_step(const c_rig& r, std::uint64_t seed) {
  r.micro_batch(r.values(seed, 0.1F));
  r.step(0.01);
}

TEST(checkpoint_client, TheBlobComesBackFromTheLoadWithTheStates) {
  c_rig r(two_modules, {.placement = "nvme"});
  ASSERT_NE(r.engine(), nullptr);
  EXPECT_TRUE(checkpoint_client(r.engine()).empty()) << "no checkpoint loaded yet";
  one_step(r, 1);
  const std::vector<float> saved = r.read(0, ZOE_STATE_PARAMETER);
  const std::vector<unsigned char> client = blob(100000);
  save_with(r, "a", client);
  EXPECT_TRUE(checkpoint_client(r.engine()).empty()) << "a save does not set what the last load gave";
  one_step(r, 2);
  ASSERT_NE(r.read(0, ZOE_STATE_PARAMETER), saved);

  c_rig other(two_modules, {.placement = "device"});
  ASSERT_NE(other.engine(), nullptr);
  for (const c_rig* to : {&r, &other}) {
    ASSERT_EQ(zoe_checkpoint_load(to->engine(), r.dir().c_str(), "a"), ZOE_SUCCESS) << zoe_last_error();
    EXPECT_EQ(checkpoint_client(to->engine()), client);
    EXPECT_EQ(to->read(0, ZOE_STATE_PARAMETER), saved);
  }
}

TEST(checkpoint_client, ACheckpointWithoutABlobLoadsWithLengthZero) {
  c_rig r(two_modules, {});
  ASSERT_NE(r.engine(), nullptr);
  save_with(r, "with", blob(10));
  ASSERT_EQ(zoe_checkpoint_save(r.engine(), r.dir().c_str(), "without"), ZOE_SUCCESS) << zoe_last_error();
  // An empty blob is no blob; its pointer may be NULL.
  ASSERT_EQ(zoe_checkpoint_save_client(r.engine(), r.dir().c_str(), "empty", nullptr, 0), ZOE_SUCCESS)
      << zoe_last_error();
  EXPECT_FALSE(std::filesystem::exists(r.dir() / "without" / "client.bin"));
  EXPECT_FALSE(std::filesystem::exists(r.dir() / "empty" / "client.bin"));
  for (const char* tag : {"without", "empty"}) {
    ASSERT_EQ(zoe_checkpoint_load(r.engine(), r.dir().c_str(), "with"), ZOE_SUCCESS) << zoe_last_error();
    ASSERT_EQ(checkpoint_client(r.engine()).size(), 10U);
    ASSERT_EQ(zoe_checkpoint_load(r.engine(), r.dir().c_str(), tag), ZOE_SUCCESS) << zoe_last_error();
    EXPECT_TRUE(checkpoint_client(r.engine()).empty()) << tag;
  }
}

// Damages client.bin in each way a crash or a disk can, and expects the load refused naming it,
// with the states and the last loaded blob as they were.
TEST(checkpoint_client, ATornOrCorruptBlobIsRefusedNamingTheFileAndChangesNothing) {
  c_rig r(two_modules, {});
  ASSERT_NE(r.engine(), nullptr);
  save_with(r, "good", blob(3));
  ASSERT_EQ(zoe_checkpoint_load(r.engine(), r.dir().c_str(), "good"), ZOE_SUCCESS) << zoe_last_error();
  one_step(r, 1);
  save_with(r, "bad", blob(5000));
  one_step(r, 2);
  const std::filesystem::path file = r.dir() / "bad" / "client.bin";
  const std::vector<unsigned char> good = checkpoint_client(r.engine());
  const std::vector<float> before = r.read(2, ZOE_STATE_PARAMETER);
  struct damage {
    const char* what;
    const char* says;
    void (*apply)(const std::filesystem::path&);
  };
  const damage damages[] = {
      {"a flipped byte", "fails its checksum",
       [](const std::filesystem::path& f) {
         std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
         io.seekp(1234);
         io.put('\xff');
       }},
      {"torn", "truncated or torn", [](const std::filesystem::path& f) { std::filesystem::resize_file(f, 4096); }},
      {"missing", "is missing", [](const std::filesystem::path& f) { std::filesystem::remove(f); }},
  };
  for (const damage& d : damages) {
    const std::filesystem::path kept = r.dir() / "kept.bin";
    std::filesystem::copy_file(file, kept, std::filesystem::copy_options::overwrite_existing);
    d.apply(file);
    EXPECT_EQ(zoe_checkpoint_load(r.engine(), r.dir().c_str(), "bad"), ZOE_ERROR_CORRUPT) << d.what;
    EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr(file.string()), HasSubstr(d.says))) << d.what;
    EXPECT_EQ(r.read(2, ZOE_STATE_PARAMETER), before) << d.what;
    EXPECT_EQ(checkpoint_client(r.engine()), good) << d.what;
    std::filesystem::rename(kept, file);
  }
  ASSERT_EQ(zoe_checkpoint_load(r.engine(), r.dir().c_str(), "bad"), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(checkpoint_client(r.engine()), blob(5000));
}

TEST(checkpoint_client, AShortBufferGetsOnlyTheLength) {
  c_rig r(two_modules, {});
  ASSERT_NE(r.engine(), nullptr);
  save_with(r, "a", blob(64));
  ASSERT_EQ(zoe_checkpoint_load(r.engine(), r.dir().c_str(), "a"), ZOE_SUCCESS) << zoe_last_error();
  std::vector<unsigned char> buffer(64, 0xAB);
  std::size_t length = 0;
  ASSERT_EQ(zoe_checkpoint_client(r.engine(), nullptr, 1000, &length), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(length, 64U);
  length = 0;
  ASSERT_EQ(zoe_checkpoint_client(r.engine(), buffer.data(), 63, &length), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(length, 64U);
  EXPECT_EQ(buffer, std::vector<unsigned char>(64, 0xAB)) << "a short buffer is left as it was";
  ASSERT_EQ(zoe_checkpoint_client(r.engine(), buffer.data(), 64, &length), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(buffer, blob(64));
  EXPECT_EQ(zoe_checkpoint_client(r.engine(), buffer.data(), 64, nullptr), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("length"));
  EXPECT_EQ(zoe_checkpoint_save_client(r.engine(), r.dir().c_str(), "b", nullptr, 5), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("zoe_checkpoint_save_client"), HasSubstr("client")));
  EXPECT_FALSE(std::filesystem::exists(r.dir() / "b"));
}

// Group 0: a and c, group 1: b, group 2: d.
const std::vector<c_module> grouped = {{"layer0", {{"a", {300}, ZOE_FP32, 0, 0}, {"b", {200}, ZOE_FP32, 0, 1}}},
                                       {"layer1", {{"c", {100}, ZOE_FP32, 0, 0}, {"d", {50}, ZOE_FP32, 0, 2}}}};
// Each group's settings of the step saved; none is the configuration's lr (the rig's 0.01).
const zoe_group_hyper group_settings[3] = {
    {sizeof(zoe_group_hyper), 0.02, 0.1}, {sizeof(zoe_group_hyper), 0.002, 0.0}, {sizeof(zoe_group_hyper), 0.3, 0.5}};

// One micro-batch stepped at group_settings, then saved as `tag`.
void step_groups_and_save(const c_rig& r, const char* tag) {
  r.micro_batch(r.values(1, 0.1F));
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  ASSERT_EQ(zoe_step_groups(r.engine(), group_settings, 3, &result), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_checkpoint_save(r.engine(), r.dir().c_str(), tag), ZOE_SUCCESS) << zoe_last_error();
}

TEST(checkpoint_client, TheGroupSettingsOfTheLoadedCheckpointAreGivenBack) {
  c_rig r(grouped, {});
  ASSERT_NE(r.engine(), nullptr);
  zoe_group_hyper got[3] = {ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT};
  EXPECT_EQ(zoe_checkpoint_groups(r.engine(), got, 3), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("no checkpoint was loaded"));
  ASSERT_NO_FATAL_FAILURE(step_groups_and_save(r, "g"));

  c_rig other(grouped, {});
  ASSERT_NE(other.engine(), nullptr);
  ASSERT_EQ(zoe_checkpoint_load(other.engine(), r.dir().c_str(), "g"), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_checkpoint_groups(other.engine(), got, 3), ZOE_SUCCESS) << zoe_last_error();
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ(got[g].lr, group_settings[g].lr) << "group " << g;
    EXPECT_EQ(got[g].weight_decay, group_settings[g].weight_decay) << "group " << g;
  }
  // Steps after the load do not change what the checkpoint kept.
  other.micro_batch(other.values(2, 0.1F));
  other.step(0.5);
  ASSERT_EQ(zoe_checkpoint_groups(other.engine(), got, 3), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(got[2].lr, group_settings[2].lr);

  EXPECT_EQ(zoe_checkpoint_groups(other.engine(), got, 2), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("count is 2"), HasSubstr("3 parameter groups")));
  got[1].struct_size = sizeof(size_t);
  got[0].lr = -1;
  EXPECT_EQ(zoe_checkpoint_groups(other.engine(), got, 3), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("groups[1]"));
  EXPECT_EQ(got[0].lr, -1) << "a refused call writes nothing";
}

// Rewrites `manifest` without its "groups" field, as a save before parameter groups wrote it, its
// own checksum made anew the way the writer makes it (checkpoint.hpp, manifest.cpp): XXH3-64 of
// the text (nlohmann's ordered dump with an indent of 1) without the "manifest_xxh3" field.
void drop_group_settings(const std::filesystem::path& manifest) {
  std::ifstream in(manifest);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  ASSERT_TRUE(j.contains("groups"));
  j.erase("groups");
  j.erase("manifest_xxh3");
  const std::string text = j.dump(1);
  char hex[17] = {};
  std::snprintf(hex, sizeof hex, "%016llx",  // NOLINT(cppcoreguidelines-pro-type-vararg)
                static_cast<unsigned long long>(XXH3_64bits(text.data(), text.size())));
  j["manifest_xxh3"] = hex;
  std::ofstream(manifest, std::ios::trunc) << j.dump(1) << "\n";
}

TEST(checkpoint_client, ACheckpointWithoutGroupSettingsLoadsWithItsRateForEveryGroup) {
  c_rig r(grouped, {});
  ASSERT_NE(r.engine(), nullptr);
  ASSERT_NO_FATAL_FAILURE(step_groups_and_save(r, "old"));
  drop_group_settings(r.dir() / "old" / "manifest.json");
  std::vector<std::vector<float>> saved;
  for (zoe_parameter_id p = 0; p < r.parameter_count(); ++p) saved.push_back(r.read(p, ZOE_STATE_PARAMETER));

  c_rig other(grouped, {});
  ASSERT_NE(other.engine(), nullptr);
  ASSERT_EQ(zoe_checkpoint_load(other.engine(), r.dir().c_str(), "old"), ZOE_SUCCESS) << zoe_last_error();
  for (zoe_parameter_id p = 0; p < other.parameter_count(); ++p) {
    EXPECT_EQ(other.read(p, ZOE_STATE_PARAMETER), saved[p]) << "parameter " << p;
  }
  // The manifest's lr (group 0's at the last step, not the configuration's) for every group, and the
  // configuration's decay (the rig's 0.01), as every group stepped before groups were kept.
  zoe_group_hyper got[3] = {ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT};
  ASSERT_EQ(zoe_checkpoint_groups(other.engine(), got, 3), ZOE_SUCCESS) << zoe_last_error();
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ(got[g].lr, group_settings[0].lr) << "group " << g;
    EXPECT_EQ(got[g].weight_decay, 0.01) << "group " << g;
  }
  other.micro_batch(other.values(2, 0.1F));
  other.step(0.01);
}

}  // namespace
}  // namespace zoe::testing
