// Checkpoints (engine/checkpoint): bit-exact round trips across placements, the scaler and
// optimizer settings, `latest`, every refusal naming its file with no state changed, links in the
// root never followed by a save, and the crash-safe sequence under a file system that crashes or
// fails at every point of a save.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>

#include "engine_stack.hpp"
#include "fault_checkpoint_fs.hpp"
#include "tiers_test_support.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"
#include "zoe/engine/swap/state_io.hpp"

namespace zoe::testing {
namespace {

using engine::parameter_id;
using engine::state_kind;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// ---- stacks ------------------------------------------------------------------------------------

/// Working copies, masters and moments on nvme (the gradient in host memory).
engine::engine_config nvme_states() {
  engine::engine_config c = nvme_config();
  engine::offload_optimizer_config o;
  o.device = engine::offload_device::nvme;
  o.nvme_path = "/nonexistent";  // engine_stack points it at its scratch folder
  c.zero.offload_optimizer = o;
  return c;
}

/// Every state in (pinned) host memory.
engine::engine_config host_states() {
  engine::engine_config c = offload_config(engine::offload_device::cpu, engine::offload_device::cpu);
  c.aio.block_size = 16 * 1024;
  return c;
}

/// Every state in device memory.
engine::engine_config device_states() {
  engine::engine_config c;
  c.zero.stage = 3;
  c.aio.block_size = 16 * 1024;
  return c;
}

std::vector<engine::module_spec> small_model(std::vector<kernels::dtype> types = {kernels::dtype::fp16}) {
  // Shards of ~20k elements: several 64 KiB write blocks per file, and padding in every shard.
  return layered_model(2, 2, 20000, std::move(types));
}

/// A stack with its state_io.
struct rig {
  engine_stack stack;
  engine::state_io io;

  /// `faults`, when given, wraps every backend of the swap store.
  rig(std::vector<engine::module_spec> modules, engine::engine_config config,
      std::shared_ptr<fault_plan> faults = nullptr)
      : stack(stack_options{.modules = std::move(modules), .config = std::move(config), .faults = std::move(faults)}),
        io(stack.tiers(), stack.dev(), &stack.movers()) {}
};

// ---- state contents ----------------------------------------------------------------------------

using state_key = std::pair<parameter_id, state_kind>;
using contents = std::map<state_key, std::vector<std::byte>>;

/// Random real elements and zero padding for every state with bytes (the gradient included).
contents random_states(const engine::model_layout& layout, std::uint64_t seed) {
  contents out;
  for (const engine::parameter_layout& p : layout.parameters()) {
    for (const state_kind s : engine::all_states) {
      const std::uint64_t bytes = engine::state_bytes(p, s);
      if (bytes == 0) continue;
      std::vector<std::byte> data(bytes, std::byte{0});
      const std::size_t real = p.numel * kernels::dtype_size(engine::state_dtype(p, s));
      const std::vector<std::byte> r = random_bytes(real, seed * 7919 + p.id * 31 + static_cast<std::uint64_t>(s));
      std::memcpy(data.data(), r.data(), real);
      out[{p.id, s}] = std::move(data);
    }
  }
  return out;
}

void write_states(rig& r, const contents& c) {
  for (const auto& [key, data] : c) r.io.write(key.first, key.second, data);
}

/// Reads back the states of `like` (the same keys).
contents read_states(rig& r, const contents& like) {
  contents out;
  for (const auto& [key, data] : like) {
    std::vector<std::byte> got(data.size());
    r.io.read(key.first, key.second, got);
    out[key] = std::move(got);
  }
  return out;
}

/// Every state of `expected` is in `r`, bit for bit (padding included).
void expect_states(rig& r, const contents& expected, const std::string& what) {
  const contents got = read_states(r, expected);
  for (const auto& [key, data] : expected) {
    EXPECT_TRUE(same_bytes(got.at(key), data))
        << what << ": parameter " << key.first << ", state " << engine::state_kind_name(key.second);
  }
}

/// `c` without its gradients (what a checkpoint keeps).
contents without_gradients(contents c) {
  std::erase_if(c, [](const auto& kv) { return kv.first.second == state_kind::gradient; });
  return c;
}

engine::checkpoint_meta sample_meta(int n) {
  engine::checkpoint_meta m;
  m.scaler = {
      .scale = 4096.0 * n, .cur_iter = 17 + n, .last_overflow_iter = 9, .cur_hysteresis = 1, .optimizer_steps = 15 + n};
  m.optimizer.type = "AdamW";
  m.optimizer.lr = 3e-4 + 1e-13 * n;  // not a short decimal: the text must round-trip exactly
  m.optimizer.betas = {0.85, 0.99913};
  m.optimizer.eps = 1.0 / 3.0 * 1e-7;
  m.optimizer.weight_decay = 0.01;
  m.optimizer.adam_w_mode = false;
  m.optimizer.bias_correction = false;
  m.lr = 0.1 / 7.0 * n;
  m.groups = {{.lr = m.lr, .weight_decay = 0.1, .betas = {0.8, 0.95}, .eps = 1e-6},
              {.lr = m.lr / 3, .weight_decay = 0.0, .betas = {0.0, 0.5 + 1e-13 * n}, .eps = 1.0 / 3.0}};
  // Every other save keeps client bytes (NULs and all), so both kinds of checkpoint are exercised.
  if (n % 2 == 0) {
    for (int i = 0; i < 3000; ++i) m.client.push_back(static_cast<char>((i * 31 + n) % 256));
  }
  return m;
}

void expect_meta(const engine::checkpoint_meta& got, const engine::checkpoint_meta& want) {
  EXPECT_EQ(got.scaler, want.scaler);
  EXPECT_EQ(got.optimizer.type, want.optimizer.type);
  EXPECT_EQ(got.optimizer.lr, want.optimizer.lr);
  EXPECT_EQ(got.optimizer.betas, want.optimizer.betas);
  EXPECT_EQ(got.optimizer.eps, want.optimizer.eps);
  EXPECT_EQ(got.optimizer.weight_decay, want.optimizer.weight_decay);
  EXPECT_EQ(got.optimizer.adam_w_mode, want.optimizer.adam_w_mode);
  EXPECT_EQ(got.optimizer.bias_correction, want.optimizer.bias_correction);
  EXPECT_EQ(got.lr, want.lr);
  EXPECT_EQ(got.groups, want.groups);  // each group's lr, weight decay, betas and eps
  EXPECT_EQ(got.client, want.client);
}

/// The real file system with small blocks, so a state file takes several writes.
engine::checkpoint_fs& small_block_fs() {
  static const std::unique_ptr<engine::checkpoint_fs> fs =
      engine::make_posix_checkpoint_fs({.block_size = 64 * 1024, .queue_depth = 4, .write_buffers = 3});
  return *fs;
}

/// Runs `f`, which must throw checkpoint_error whose message holds `needle`; returns the message.
template <typename F>
std::string expect_refused(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "not refused (expected a checkpoint_error naming '" << needle << "')";
  } catch (const engine::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    return e.what();
  }
  return {};
}

/// The names in `folder` (links not followed).
std::set<std::string> names_in(const fs::path& folder) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.insert(e.path().filename().string());
  return names;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---- round trips -------------------------------------------------------------------------------

struct round_trip_case {
  std::string name;
  std::vector<kernels::dtype> types;
  engine::engine_config (*save_config)();
  engine::engine_config (*load_config)();
};

// gtest names a case by its parameter: the name, not the bytes.
void PrintTo(const round_trip_case& c, std::ostream* out) { *out << c.name; }  // NOLINT(readability-identifier-naming)

class checkpoint_round_trip : public ::testing::TestWithParam<round_trip_case> {};

TEST_P(checkpoint_round_trip, loads_every_state_bit_exact_into_a_fresh_stack) {
  const round_trip_case& c = GetParam();
  scratch_dir root;
  contents saved;
  {
    rig from(small_model(c.types), c.save_config());
    saved = random_states(from.stack.layout(), 1);
    write_states(from, saved);
    engine::save_checkpoint(root.path(), "step-1", from.stack.tiers(), from.io, sample_meta(1), small_block_fs());
    expect_states(from, saved, "the saved stack after the save");  // a save changes no state
  }
  rig to(small_model(c.types), c.load_config());
  const engine::checkpoint_meta meta =
      engine::load_checkpoint(root.path(), "", to.stack.tiers(), to.io, small_block_fs());
  expect_meta(meta, sample_meta(1));
  expect_states(to, without_gradients(saved), "the loaded stack");
  // Nothing of the gradient is saved, and a load leaves it released in a fresh stack.
  for (const engine::parameter_layout& p : to.stack.layout().parameters()) {
    EXPECT_EQ(to.stack.tiers().status(p.id, state_kind::gradient), engine::state_status::released);
  }
  const bool all_fp32 =
      std::all_of(c.types.begin(), c.types.end(), [](kernels::dtype t) { return t == kernels::dtype::fp32; });
  EXPECT_EQ(fs::exists(root.path() / "step-1" / "working.bin"), !all_fp32);
  EXPECT_FALSE(fs::exists(root.path() / "step-1" / "gradient.bin"));
}

INSTANTIATE_TEST_SUITE_P(
    placements, checkpoint_round_trip,
    ::testing::Values(round_trip_case{"fp16_nvme_to_nvme", {kernels::dtype::fp16}, nvme_states, nvme_states},
                      round_trip_case{"fp32_nvme_to_nvme", {kernels::dtype::fp32}, nvme_states, nvme_states},
                      round_trip_case{"fp16_nvme_to_host", {kernels::dtype::fp16}, nvme_states, host_states},
                      round_trip_case{"fp16_nvme_to_device", {kernels::dtype::fp16}, nvme_states, device_states},
                      round_trip_case{"fp16_host_to_nvme", {kernels::dtype::fp16}, host_states, nvme_states},
                      round_trip_case{"fp32_device_to_nvme", {kernels::dtype::fp32}, device_states, nvme_states},
                      round_trip_case{"bf16_fp32_mixed_host_to_host",
                                      {kernels::dtype::bf16, kernels::dtype::fp32},
                                      host_states,
                                      host_states}),
    [](const ::testing::TestParamInfo<round_trip_case>& param) { return param.param.name; });

TEST(checkpoint, states_larger_than_a_piece_stream_through_in_pieces) {
  // 2.5M elements: a 10 MB master (three 4 MiB pieces of the save and of the load) and a 5 MB
  // working copy, saved from nvme and loaded into host memory and into nvme.
  const std::vector<engine::module_spec> model = {
      {"big", {{"big.w", {2'500'003}, kernels::dtype::fp16}, {"big.b", {1000}, kernels::dtype::fp16}}}};
  scratch_dir root;
  contents saved;
  {
    rig from(model, nvme_states());
    saved = without_gradients(random_states(from.stack.layout(), 4));
    write_states(from, saved);
    engine::save_checkpoint(root.path(), "step-1", from.stack.tiers(), from.io, sample_meta(1));
  }
  for (auto* config : {host_states, nvme_states}) {
    rig to(model, config());
    (void)engine::load_checkpoint(root.path(), "", to.stack.tiers(), to.io);
    expect_states(to, saved, "a model of large states");
  }
}

TEST(checkpoint, load_leaves_the_gradient_as_it_was) {
  scratch_dir root;
  rig r(small_model(), nvme_states());
  const contents a = random_states(r.stack.layout(), 1);
  write_states(r, a);
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
  const contents b = random_states(r.stack.layout(), 2);
  write_states(r, b);
  (void)engine::load_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, small_block_fs());
  contents want = without_gradients(a);
  for (const auto& [key, data] : b) {
    if (key.second == state_kind::gradient) want[key] = data;
  }
  expect_states(r, want, "after loading step-1 over other states");
}

TEST(checkpoint, latest_names_the_newest_and_each_tag_loads_its_own_states) {
  scratch_dir root;
  rig r(small_model(), host_states());
  EXPECT_EQ(engine::latest_checkpoint(root.path() / "ckpt", small_block_fs()), std::nullopt);
  const contents a = random_states(r.stack.layout(), 1);
  write_states(r, a);
  // root is created, with the folders above it.
  engine::save_checkpoint(root.path() / "ckpt" / "run", "step-1", r.stack.tiers(), r.io, sample_meta(1),
                          small_block_fs());
  const contents b = random_states(r.stack.layout(), 2);
  write_states(r, b);
  engine::save_checkpoint(root.path() / "ckpt" / "run", "step-2", r.stack.tiers(), r.io, sample_meta(2),
                          small_block_fs());
  const fs::path run = root.path() / "ckpt" / "run";
  EXPECT_EQ(engine::latest_checkpoint(run, small_block_fs()), "step-2");

  expect_meta(engine::load_checkpoint(run, "step-1", r.stack.tiers(), r.io, small_block_fs()), sample_meta(1));
  expect_states(r, without_gradients(a), "step-1");
  expect_meta(engine::load_checkpoint(run, "", r.stack.tiers(), r.io, small_block_fs()), sample_meta(2));
  expect_states(r, without_gradients(b), "latest (step-2)");

  // No staging folder or temporary file is left behind.
  EXPECT_EQ(names_in(run), (std::set<std::string>{"latest", "step-1", "step-2"}));
  EXPECT_EQ(names_in(run / "step-2"), (std::set<std::string>{"working.bin", "master.bin", "exp_avg.bin",
                                                             "exp_avg_sq.bin", "client.bin", "manifest.json"}));
}

TEST(checkpoint, saving_a_tag_again_replaces_it_whole) {
  scratch_dir root;
  rig r(small_model(), nvme_states());
  write_states(r, random_states(r.stack.layout(), 1));
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
  const contents b = random_states(r.stack.layout(), 2);
  write_states(r, b);
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(2), small_block_fs());
  write_states(r, random_states(r.stack.layout(), 3));
  expect_meta(engine::load_checkpoint(root.path(), "", r.stack.tiers(), r.io, small_block_fs()), sample_meta(2));
  expect_states(r, without_gradients(b), "step-1 saved again");
  EXPECT_FALSE(fs::exists(root.path() / ".step-1.partial"));
}

TEST(checkpoint, a_state_that_cannot_be_read_fails_the_save_and_leaves_the_previous_checkpoint) {
  scratch_dir root;
  const auto faults = std::make_shared<fault_plan>();
  // Working copies in host memory, the optimizer's states on nvme: the save writes working.bin
  // from the homes in place, then meets the failed read of the first master.
  engine::engine_config config = offload_config(engine::offload_device::cpu, engine::offload_device::nvme);
  config.aio.block_size = 16 * 1024;
  rig r(small_model(), config, faults);
  const contents a = random_states(r.stack.layout(), 1);
  write_states(r, a);
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
  const contents b = random_states(r.stack.layout(), 2);
  write_states(r, b);
  faults->add({.op = io::io_op::read, .inject_errno = EIO, .times = 1});
  EXPECT_THROW(engine::save_checkpoint(root.path(), "step-2", r.stack.tiers(), r.io, sample_meta(2), small_block_fs()),
               io_error);
  EXPECT_EQ(faults->fired(), 1);
  EXPECT_EQ(engine::latest_checkpoint(root.path(), small_block_fs()), "step-1");
  EXPECT_FALSE(fs::exists(root.path() / ".step-2.partial"));
  EXPECT_FALSE(fs::exists(root.path() / "step-2"));
  // A failed read leaves every state resident as it was.
  expect_states(r, b, "after the failed save");
  (void)engine::load_checkpoint(root.path(), "", r.stack.tiers(), r.io, small_block_fs());
  expect_states(r, without_gradients(a), "step-1 after the failed save");
}

TEST(checkpoint, save_refuses_a_bad_tag_and_a_state_not_resident) {
  scratch_dir root;
  rig r(small_model(), host_states());
  for (const std::string tag : {"", ".hidden", "a/b", "latest"}) {
    EXPECT_THROW(engine::save_checkpoint(root.path(), tag, r.stack.tiers(), r.io, sample_meta(1), small_block_fs()),
                 usage_error)
        << "tag '" << tag << "'";
  }
  // A fresh stack: every state released.
  try {
    engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
    ADD_FAILURE() << "a released state was saved";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("layer0.w0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root.path() / "latest"));
}

TEST(checkpoint, a_tag_that_names_what_zoe_writes_in_the_root_is_refused_before_anything_is_written) {
  scratch_dir root;
  rig r(small_model(), host_states());
  const contents a = random_states(r.stack.layout(), 1);
  write_states(r, a);
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
  // `latest` and the temporary name it is written under: a folder there would stop `latest` from
  // ever moving again.
  for (const std::string tag : {"latest", "latest.tmp"}) {
    try {
      engine::save_checkpoint(root.path(), tag, r.stack.tiers(), r.io, sample_meta(2), small_block_fs());
      ADD_FAILURE() << "the tag '" << tag << "' was saved";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + tag + "'"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)engine::load_checkpoint(root.path(), tag, r.stack.tiers(), r.io, small_block_fs()), usage_error)
        << "tag '" << tag << "'";
    EXPECT_EQ(names_in(root.path()), (std::set<std::string>{"latest", "step-1"})) << "after the tag '" << tag << "'";
  }
  write_states(r, random_states(r.stack.layout(), 2));
  engine::save_checkpoint(root.path(), "step-2", r.stack.tiers(), r.io, sample_meta(2), small_block_fs());
  EXPECT_EQ(engine::latest_checkpoint(root.path(), small_block_fs()), "step-2");
}

TEST(checkpoint, save_refuses_a_non_finite_scale_or_setting_and_writes_nothing) {
  // JSON has no inf or NaN: such a number would be written as null, a checkpoint no load takes,
  // with `latest` already moved to it.
  struct spoiled {
    std::string field;
    void (*spoil)(engine::checkpoint_meta&);
  };
  constexpr double inf = std::numeric_limits<double>::infinity();
  const std::vector<spoiled> cases = {
      {"loss_scaler.scale is inf", [](engine::checkpoint_meta& m) { m.scaler.scale = inf; }},
      {"loss_scaler.scale is -inf", [](engine::checkpoint_meta& m) { m.scaler.scale = -inf; }},
      {"loss_scaler.scale is nan", [](engine::checkpoint_meta& m) { m.scaler.scale = std::nan(""); }},
      {": lr is inf", [](engine::checkpoint_meta& m) { m.lr = inf; }},
      {"optimizer.eps is nan", [](engine::checkpoint_meta& m) { m.optimizer.eps = std::nan(""); }},
      {"optimizer.betas[1] is inf", [](engine::checkpoint_meta& m) { m.optimizer.betas[1] = inf; }},
      {"groups.betas[0] is nan", [](engine::checkpoint_meta& m) { m.groups[1].betas[0] = std::nan(""); }},
      {"groups.eps is inf", [](engine::checkpoint_meta& m) { m.groups[0].eps = inf; }},
  };
  scratch_dir root;
  rig r(small_model(), host_states());
  const contents a = random_states(r.stack.layout(), 1);
  write_states(r, a);
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
  write_states(r, random_states(r.stack.layout(), 2));
  for (const spoiled& c : cases) {
    engine::checkpoint_meta meta = sample_meta(2);
    c.spoil(meta);
    try {
      engine::save_checkpoint(root.path(), "step-2", r.stack.tiers(), r.io, meta, small_block_fs());
      ADD_FAILURE() << "saved although " << c.field;
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << e.what();
    }
    EXPECT_EQ(engine::latest_checkpoint(root.path(), small_block_fs()), "step-1") << c.field;
    EXPECT_EQ(names_in(root.path()), (std::set<std::string>{"latest", "step-1"})) << c.field;
  }
  expect_meta(engine::load_checkpoint(root.path(), "", r.stack.tiers(), r.io, small_block_fs()), sample_meta(1));
  expect_states(r, without_gradients(a), "step-1 after the refused saves");
}

// ---- symbolic links in the root ------------------------------------------------------------------

TEST(checkpoint, saving_over_a_tag_that_is_a_link_is_refused_and_the_checkpoint_it_names_stays) {
  scratch_dir root;
  rig r(small_model(), host_states());
  const contents a = random_states(r.stack.layout(), 1);
  write_states(r, a);
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
  fs::create_directory_symlink("step-1", root.path() / "best");
  write_states(r, random_states(r.stack.layout(), 2));
  try {
    engine::save_checkpoint(root.path(), "best", r.stack.tiers(), r.io, sample_meta(2), small_block_fs());
    ADD_FAILURE() << "a save over the link 'best' was not refused";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find((root.path() / "best").string()), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_symlink(root.path() / "best"));
  EXPECT_EQ(names_in(root.path() / "step-1"),
            (std::set<std::string>{"working.bin", "master.bin", "exp_avg.bin", "exp_avg_sq.bin", "manifest.json"}));
  EXPECT_EQ(engine::latest_checkpoint(root.path(), small_block_fs()), "step-1");
  expect_meta(engine::load_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, small_block_fs()), sample_meta(1));
  expect_states(r, without_gradients(a), "step-1 after the refused save over its link");
}

TEST(checkpoint, a_save_replaces_links_at_the_names_it_writes_and_never_follows_them) {
  // Links where a save writes its own names (the staging folder, `latest`'s temporary name,
  // `latest`) to things outside the root: each link is replaced, nothing outside is touched.
  scratch_dir root;
  scratch_dir outside;
  fs::create_directory(outside.path() / "folder");
  std::ofstream(outside.path() / "folder" / "kept") << "precious";
  std::ofstream(outside.path() / "file") << "precious";
  fs::create_directory_symlink(outside.path() / "folder", root.path() / ".step-1.partial");
  fs::create_symlink(outside.path() / "file", root.path() / "latest.tmp");
  fs::create_symlink(outside.path() / "file", root.path() / "latest");
  rig r(small_model(), host_states());
  const contents a = random_states(r.stack.layout(), 1);
  write_states(r, a);
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
  EXPECT_EQ(read_text(outside.path() / "folder" / "kept"), "precious");
  EXPECT_EQ(read_text(outside.path() / "file"), "precious");
  EXPECT_EQ(names_in(root.path()), (std::set<std::string>{"latest", "step-1"}));
  EXPECT_FALSE(fs::is_symlink(root.path() / "latest"));
  EXPECT_EQ(engine::latest_checkpoint(root.path(), small_block_fs()), "step-1");
  expect_meta(engine::load_checkpoint(root.path(), "", r.stack.tiers(), r.io, small_block_fs()), sample_meta(1));
  expect_states(r, without_gradients(a), "step-1 saved over links");
}

TEST(checkpoint, a_tag_that_is_a_link_loads_the_checkpoint_it_names) {
  // A load only reads, and validates what it reads: it follows a link the user made, in the root
  // (an alias) or out of it.
  scratch_dir root;
  scratch_dir elsewhere;
  rig r(small_model(), host_states());
  const contents a = random_states(r.stack.layout(), 1);
  write_states(r, a);
  engine::save_checkpoint(root.path(), "step-1", r.stack.tiers(), r.io, sample_meta(1), small_block_fs());
  const contents b = random_states(r.stack.layout(), 2);
  write_states(r, b);
  engine::save_checkpoint(elsewhere.path(), "step-2", r.stack.tiers(), r.io, sample_meta(2), small_block_fs());
  fs::create_directory_symlink("step-1", root.path() / "best");
  fs::create_directory_symlink(elsewhere.path() / "step-2", root.path() / "imported");
  expect_meta(engine::load_checkpoint(root.path(), "best", r.stack.tiers(), r.io, small_block_fs()), sample_meta(1));
  expect_states(r, without_gradients(a), "step-1 through the link 'best'");
  expect_meta(engine::load_checkpoint(root.path(), "imported", r.stack.tiers(), r.io, small_block_fs()),
              sample_meta(2));
  expect_states(r, without_gradients(b), "step-2 through the link 'imported'");
}

// ---- refusals ----------------------------------------------------------------------------------

/// A saved checkpoint (step-1, of states `saved`) and a stack holding other states (`current`).
class checkpoint_refusal : public ::testing::Test {
 protected:
  checkpoint_refusal() : r_(small_model(), nvme_states()) {
    saved_ = random_states(r_.stack.layout(), 1);
    write_states(r_, saved_);
    engine::save_checkpoint(root_.path(), "step-1", r_.stack.tiers(), r_.io, sample_meta(1), small_block_fs());
    current_ = random_states(r_.stack.layout(), 2);
    write_states(r_, current_);
  }

  [[nodiscard]] fs::path folder() const { return root_.path() / "step-1"; }

  /// Loading is refused with a message naming `needle`, and every state is still `current_`.
  void expect_load_refused(const std::string& needle) {
    expect_refused([&] { (void)engine::load_checkpoint(root_.path(), "", r_.stack.tiers(), r_.io, small_block_fs()); },
                   needle);
    expect_states(r_, current_, "after a refused load");
  }

  /// Changes the manifest's text, as a flipped byte would: its own checksum no longer matches.
  void edit_manifest(const std::string& from, const std::string& to) {
    const fs::path path = folder() / "manifest.json";
    std::string text = read_text(path);
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(path, std::ios::trunc) << text;
  }

  /// Changes the manifest as its writer would (a manifest of another version or model, not a
  /// damaged one): `change` edits the JSON, and the manifest's own checksum is made anew, as
  /// checkpoint.hpp defines it: XXH3-64 of the text (dump(1)) without the "manifest_xxh3" field.
  void rewrite_manifest(const std::function<void(json&)>& change) {
    json j = manifest_json();
    j.erase("manifest_xxh3");
    change(j);
    const std::string text = j.dump(1);
    std::array<char, 17> hex{};
    std::snprintf(hex.data(), hex.size(), "%016llx",  // NOLINT(cppcoreguidelines-pro-type-vararg)
                  static_cast<unsigned long long>(XXH3_64bits(text.data(), text.size())));
    j["manifest_xxh3"] = hex.data();
    write_manifest(j);
  }

  [[nodiscard]] json manifest_json() const { return json::parse(read_text(folder() / "manifest.json")); }
  void write_manifest(const json& j) const { std::ofstream(folder() / "manifest.json", std::ios::trunc) << j.dump(1); }

  scratch_dir root_;
  rig r_;
  contents saved_;
  contents current_;
};

TEST_F(checkpoint_refusal, a_truncated_file) {
  fs::resize_file(folder() / "master.bin", fs::file_size(folder() / "master.bin") - 1);
  expect_load_refused((folder() / "master.bin").string());
}

TEST_F(checkpoint_refusal, a_flipped_byte) {
  const fs::path path = folder() / "exp_avg_sq.bin";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(12345);
  char c = 0;
  f.get(c);
  f.seekp(12345);
  f.put(static_cast<char>(c ^ 0x10));
  f.close();
  expect_load_refused(path.string());
}

TEST_F(checkpoint_refusal, a_missing_state_file) {
  fs::remove(folder() / "working.bin");
  expect_load_refused((folder() / "working.bin").string());
}

TEST_F(checkpoint_refusal, a_missing_manifest) {
  fs::remove(folder() / "manifest.json");
  expect_load_refused((folder() / "manifest.json").string());
}

TEST_F(checkpoint_refusal, a_manifest_that_is_not_json) {
  std::ofstream(folder() / "manifest.json", std::ios::trunc) << "{\"format\": \"zoe checkpoint\", ";
  expect_load_refused((folder() / "manifest.json").string());
}

TEST_F(checkpoint_refusal, another_format_version) {
  rewrite_manifest([](json& j) { j["format_version"] = 2; });
  expect_load_refused("format version 2");
  expect_load_refused((folder() / "manifest.json").string());
}

TEST_F(checkpoint_refusal, a_changed_value_in_the_manifest) {
  // Still valid JSON of the right shape: only the manifest's own checksum can tell.
  edit_manifest("\"cur_iter\": 18", "\"cur_iter\": 19");
  expect_load_refused((folder() / "manifest.json").string());
  expect_load_refused("does not match its own checksum");
}

// A damaged manifest is reported as damaged, whatever the damaged byte now says: nothing it holds
// is believed before its own checksum is.
TEST_F(checkpoint_refusal, a_damaged_format_version_is_reported_as_damage_not_as_another_version) {
  edit_manifest("\"format_version\": 1", "\"format_version\": 7");
  const std::string message = expect_refused(
      [&] { (void)engine::load_checkpoint(root_.path(), "", r_.stack.tiers(), r_.io, small_block_fs()); },
      "does not match its own checksum");
  EXPECT_EQ(message.find("format version 7"), std::string::npos) << message;
  expect_load_refused((folder() / "manifest.json").string());
}

TEST_F(checkpoint_refusal, a_damaged_parameter_name_is_reported_as_damage_not_as_another_model) {
  edit_manifest("\"layer1.w0\"", "\"layer1.w9\"");
  const std::string message = expect_refused(
      [&] { (void)engine::load_checkpoint(root_.path(), "", r_.stack.tiers(), r_.io, small_block_fs()); },
      "does not match its own checksum");
  EXPECT_EQ(message.find("another model"), std::string::npos) << message;
  expect_states(r_, current_, "after a refused load");
}

TEST_F(checkpoint_refusal, a_manifest_without_its_own_checksum) {
  json j = manifest_json();
  j.erase("manifest_xxh3");
  write_manifest(j);
  expect_load_refused("manifest_xxh3");
  expect_load_refused((folder() / "manifest.json").string());
}

TEST_F(checkpoint_refusal, a_manifest_missing_a_field_names_the_field) {
  rewrite_manifest([](json& j) { j["loss_scaler"].erase("optimizer_steps"); });
  expect_load_refused("loss_scaler.optimizer_steps");
}

// A checkpoint saved before groups kept their own betas and eps stepped every group with the
// optimizer's: those are the groups' after its load.
TEST_F(checkpoint_refusal, groups_saved_without_betas_and_eps_load_the_optimizers) {
  rewrite_manifest([](json& j) {
    for (json& g : j["groups"]) {
      g.erase("betas");
      g.erase("eps");
    }
  });
  const engine::checkpoint_meta meta =
      engine::load_checkpoint(root_.path(), "", r_.stack.tiers(), r_.io, small_block_fs());
  const engine::checkpoint_meta want = sample_meta(1);
  ASSERT_EQ(meta.groups.size(), want.groups.size());
  for (std::size_t g = 0; g < meta.groups.size(); ++g) {
    EXPECT_EQ(meta.groups[g].lr, want.groups[g].lr);
    EXPECT_EQ(meta.groups[g].betas, want.optimizer.betas);
    EXPECT_EQ(meta.groups[g].eps, want.optimizer.eps);
  }
  write_states(r_, current_);  // the load took the saved states: the refusal below must leave these
  rewrite_manifest([](json& j) { j["groups"][1]["betas"] = json::array({0.9}); });
  expect_load_refused("groups[1].betas is not two numbers");
}

TEST_F(checkpoint_refusal, a_tag_that_was_never_saved) {
  expect_refused([&] { (void)engine::load_checkpoint(root_.path(), "step-7", r_.stack.tiers(), r_.io); },
                 (root_.path() / "step-7").string());
  expect_states(r_, current_, "after a refused load");
}

/// Sets `key` to `to` in the one element of array `list` whose `key` is `from`.
void replace_in(json& list, const std::string& key, const std::string& from, const std::string& to) {
  const auto it = std::find_if(list.begin(), list.end(), [&](const json& e) { return e.at(key) == from; });
  ASSERT_NE(it, list.end()) << from;
  (*it)[key] = to;
}

TEST_F(checkpoint_refusal, a_manifest_of_another_model) {
  // The same layout under another name: everything else would load.
  rewrite_manifest([](json& j) { replace_in(j["model"], "name", "layer1.w0", "layer1.w9"); });
  expect_load_refused("layer1.w9");
  expect_load_refused("another model");
}

TEST_F(checkpoint_refusal, a_manifest_naming_a_file_outside_the_folder) {
  rewrite_manifest([](json& j) { replace_in(j["files"], "file", "master.bin", "../master.bin"); });
  expect_load_refused((folder() / "manifest.json").string());
  expect_load_refused("'../master.bin'");
}

TEST_F(checkpoint_refusal, client_bytes_listed_under_another_file_name) {
  rewrite_manifest([](json& j) {
    j["client"] = {{"file", "../master.bin"}, {"bytes", 8}, {"xxh3", "0123456789abcdef"}};
  });
  expect_load_refused("client.file");
  expect_load_refused("'../master.bin' is not 'client.bin'");
}

TEST_F(checkpoint_refusal, client_bytes_listed_but_never_written) {
  rewrite_manifest([](json& j) { j["client"] = {{"file", "client.bin"}, {"bytes", 8}, {"xxh3", "0123456789abcdef"}}; });
  expect_load_refused((folder() / "client.bin").string() + "' is missing");
}

TEST_F(checkpoint_refusal, a_stack_of_another_model) {
  // Another shape for one parameter: the refusal names it, and that stack's states stay as they are.
  std::vector<engine::module_spec> other = small_model();
  other[1].parameters[1].shape = {123, 45};
  rig o(other, host_states());
  const contents mine = random_states(o.stack.layout(), 3);
  write_states(o, mine);
  expect_refused(
      [&] { (void)engine::load_checkpoint(root_.path(), "step-1", o.stack.tiers(), o.io, small_block_fs()); },
      "layer1.w1");
  expect_states(o, mine, "the other model's stack after a refused load");
}

TEST_F(checkpoint_refusal, a_latest_that_names_no_folder_and_no_latest) {
  std::ofstream(root_.path() / "latest", std::ios::trunc) << "step-9\n";
  expect_refused([&] { (void)engine::latest_checkpoint(root_.path(), small_block_fs()); }, "step-9");
  expect_load_refused((root_.path() / "latest").string());
  fs::remove(root_.path() / "latest");
  expect_load_refused((root_.path() / "latest").string());
}

// ---- crashes and failures during a save ----------------------------------------------------------

/// A checkpoint root inside a folder the fault file system models; a stack whose states are
/// saved as step-1 (`a_`) and then changed to `b_`, which the next save writes.
class checkpoint_crash : public ::testing::Test {
 protected:
  checkpoint_crash() : r_(small_model(), nvme_states()) {
    a_ = random_states(r_.stack.layout(), 1);
    b_ = random_states(r_.stack.layout(), 2);
    // step-1 once, through a fault fs that keeps it all (nothing of a finished save may be lost);
    // each case copies it instead of saving it again.
    fs::create_directory(step1_.path() / "disk");
    fault_checkpoint_fs faults(small_block_fs(), step1_.path() / "disk");
    write_states(r_, a_);
    engine::save_checkpoint(root(step1_.path() / "disk"), "step-1", r_.stack.tiers(), r_.io, sample_meta(1), faults);
    faults.drop_unsynced();
  }

  /// `base` holding step-1 and nothing else, tracked by a fresh fault fs; the stack holds b_.
  [[nodiscard]] std::unique_ptr<fault_checkpoint_fs> fresh_root(const fs::path& base) {
    fs::remove_all(base);
    fs::copy(step1_.path() / "disk", base, fs::copy_options::recursive);
    write_states(r_, b_);
    return std::make_unique<fault_checkpoint_fs>(small_block_fs(), base);
  }

  static fs::path root(const fs::path& base) { return base / "ckpt"; }

  /// Saves b_ as `tag` with the crash at operation `n`, then drops what the crash loses. Returns
  /// whether the save returned (it does when the crash hits its last steps, the best-effort
  /// removal of what it replaced, whose failure it only logs).
  bool save_crashing_at(fault_checkpoint_fs& faults, const fs::path& base, const std::string& tag, std::uint64_t n) {
    faults.crash_at(n);
    bool returned = true;
    try {
      engine::save_checkpoint(root(base), tag, r_.stack.tiers(), r_.io, sample_meta(2), faults);
    } catch (const simulated_crash&) {
      returned = false;
    }
    EXPECT_TRUE(faults.crashed()) << "the save took fewer than " << n + 1 << " operations";
    faults.drop_unsynced();
    return returned;
  }

  /// After the crash: latest names a complete checkpoint, which loads, and equals a_ or b_.
  /// Returns the tag.
  std::string expect_recovered(const fs::path& base, std::uint64_t n) {
    const std::optional<std::string> latest = engine::latest_checkpoint(root(base), small_block_fs());
    EXPECT_TRUE(latest.has_value()) << "crash at operation " << n;
    if (!latest) return {};
    write_states(r_, random_states(r_.stack.layout(), 9));  // so the load must write every state
    engine::checkpoint_meta meta;
    try {
      meta = engine::load_checkpoint(root(base), "", r_.stack.tiers(), r_.io, small_block_fs());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "crash at operation " << n << ": " << *latest << " does not load: " << e.what();
      return *latest;
    }
    const contents got = read_states(r_, without_gradients(a_));
    const bool is_a = std::all_of(got.begin(), got.end(), [&](const auto& kv) { return kv.second == a_.at(kv.first); });
    const bool is_b = std::all_of(got.begin(), got.end(), [&](const auto& kv) { return kv.second == b_.at(kv.first); });
    EXPECT_TRUE(is_a || is_b) << "crash at operation " << n << ": " << *latest
                              << " loads states that are neither the old checkpoint's nor the new one's";
    EXPECT_EQ(meta.scaler, sample_meta(is_a ? 1 : 2).scaler) << "crash at operation " << n;
    EXPECT_EQ(meta.client, sample_meta(is_a ? 1 : 2).client) << "crash at operation " << n;
    return is_a ? "a" : "b";
  }

  scratch_dir step1_;
  rig r_;
  contents a_;
  contents b_;
};

TEST_F(checkpoint_crash, the_previous_checkpoint_survives_a_crash_at_any_point_of_a_save) {
  scratch_dir scratch;
  const fs::path base = scratch.path() / "disk";
  // A whole save, to count its operations: nothing of it may be lost.
  auto faults = fresh_root(base);
  engine::save_checkpoint(root(base), "step-2", r_.stack.tiers(), r_.io, sample_meta(2), *faults);
  const std::uint64_t operations = faults->operations();
  ASSERT_GT(operations, 20U);
  faults->drop_unsynced();
  EXPECT_EQ(expect_recovered(base, operations), "b");

  std::mt19937_64 rng(20261125);
  std::vector<std::uint64_t> points = {0, operations - 1, operations - 2};
  while (points.size() < 30) points.push_back(rng() % operations);
  for (const std::uint64_t n : points) {
    faults = fresh_root(base);
    const bool returned = save_crashing_at(*faults, base, "step-2", n);
    const std::string got = expect_recovered(base, n);
    if (returned) {
      EXPECT_EQ(got, "b") << "the save returned, yet step-2 is lost (crash at operation " << n << ")";
    }
    EXPECT_EQ(engine::latest_checkpoint(root(base), small_block_fs()), got == "b" ? "step-2" : "step-1")
        << "crash at operation " << n;
  }
}

TEST_F(checkpoint_crash, a_crash_while_a_tag_is_saved_again_leaves_the_old_or_the_new_one_whole) {
  scratch_dir scratch;
  const fs::path base = scratch.path() / "disk";
  auto faults = fresh_root(base);
  engine::save_checkpoint(root(base), "step-1", r_.stack.tiers(), r_.io, sample_meta(2), *faults);
  const std::uint64_t operations = faults->operations();
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> points = {operations - 1, operations - 4, operations - 8};
  while (points.size() < 16) points.push_back(rng() % operations);
  for (const std::uint64_t n : points) {
    faults = fresh_root(base);
    const bool returned = save_crashing_at(*faults, base, "step-1", n);
    const std::string got = expect_recovered(base, n);
    if (returned) {
      EXPECT_EQ(got, "b") << "the save returned, yet the old step-1 is back (crash at operation " << n << ")";
    }
    EXPECT_EQ(engine::latest_checkpoint(root(base), small_block_fs()), "step-1");
  }
}

TEST_F(checkpoint_crash, an_io_error_at_any_point_of_a_save_leaves_the_previous_checkpoint_and_latest) {
  scratch_dir scratch;
  const fs::path base = scratch.path() / "disk";
  auto faults = fresh_root(base);
  engine::save_checkpoint(root(base), "step-2", r_.stack.tiers(), r_.io, sample_meta(2), *faults);
  const std::uint64_t operations = faults->operations();
  // The save's last operation is the cleanup's look for a staging folder; before it, root's fsync.
  const std::uint64_t last_root_sync = operations - 2;
  for (std::uint64_t n = 0; n < operations; ++n) {
    faults = fresh_root(base);
    faults->fail_at(n);
    bool failed = false;
    try {
      engine::save_checkpoint(root(base), "step-2", r_.stack.tiers(), r_.io, sample_meta(2), *faults);
    } catch (const io_error& e) {
      failed = true;
      EXPECT_NE(std::string(e.what()).find(base.string()), std::string::npos) << e.what();
    }
    // The last operations clean up what the save replaced: a failure there is only logged.
    if (!failed) continue;
    if (n == last_root_sync) {
      // `latest` was already renamed: it may name the new checkpoint, which is complete.
      EXPECT_EQ(engine::latest_checkpoint(root(base), small_block_fs()), "step-2");
      continue;
    }
    EXPECT_EQ(engine::latest_checkpoint(root(base), small_block_fs()), "step-1") << "failure at operation " << n;
    EXPECT_FALSE(fs::exists(root(base) / ".step-2.partial")) << "failure at operation " << n;
    write_states(r_, random_states(r_.stack.layout(), 9));
    expect_meta(engine::load_checkpoint(root(base), "", r_.stack.tiers(), r_.io, small_block_fs()), sample_meta(1));
    expect_states(r_, without_gradients(a_), str("step-1 after a failure at operation ", n));
  }
}

// ---- the file systems --------------------------------------------------------------------------

TEST(checkpoint_fs, appends_of_any_size_read_back_at_any_offset) {
  scratch_dir dir;
  engine::checkpoint_fs& fs = small_block_fs();
  const fs::path path = dir.path() / "data.bin";
  const std::vector<std::byte> data = random_bytes(1'000'003, 5);
  {
    const auto w = fs.create(path);
    std::mt19937_64 rng(3);
    for (std::size_t at = 0; at < data.size();) {
      const std::size_t n = std::min<std::size_t>(data.size() - at, rng() % 150'000);
      w->append(std::span(data).subspan(at, n));
      at += n;
    }
    w->sync();
    EXPECT_EQ(w->size(), data.size());
  }
  const auto r = fs.open(path);
  ASSERT_EQ(r->size(), data.size());
  std::vector<std::byte> all(data.size());
  r->read(0, all);
  EXPECT_TRUE(same_bytes(all, data));
  std::vector<std::byte> some(70'001);
  r->read(123'457, some);
  EXPECT_TRUE(same_bytes(some, std::span(data).subspan(123'457, some.size())));
  try {
    r->read(data.size() - 10, some);
    ADD_FAILURE() << "a read past the end succeeded";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

TEST(checkpoint_fs, folder_operations_and_their_errors_name_the_path) {
  scratch_dir dir;
  engine::checkpoint_fs& fs = engine::checkpoint_fs::posix();
  const fs::path a = dir.path() / "a";
  const fs::path b = dir.path() / "b";
  fs.create_directory(a);
  fs.create_directory(a);  // already there: nothing
  fs.sync_directory(a);
  {
    const auto w = fs.create(b);
    w->append(std::as_bytes(std::span("b", 1)));
    w->sync();
  }
  fs.exchange(a, b);
  EXPECT_TRUE(fs::is_regular_file(a));
  EXPECT_TRUE(fs::is_directory(b));
  fs.rename(a, dir.path() / "c");
  EXPECT_FALSE(fs.exists(a));
  std::vector<std::string> names = fs.list(dir.path());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"b", "c"}));
  fs.remove(b);
  fs.remove(dir.path() / "c");
  fs.remove(dir.path() / "c");  // missing: nothing
  EXPECT_TRUE(fs.list(dir.path()).empty());
  try {
    (void)fs.open(dir.path() / "missing");
    ADD_FAILURE() << "opened a missing file";
  } catch (const io_error& e) {
    EXPECT_EQ(e.os_errno(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fs.rename(dir.path() / "x", dir.path() / "y"), io_error);
  EXPECT_THROW(fs.sync_directory(dir.path() / "x"), io_error);
}

TEST(fault_checkpoint_fs, a_crash_drops_unsynced_bytes_and_names_not_synced_in_their_folder) {
  scratch_dir dir;
  const fs::path old_file = dir.path() / "old";
  std::ofstream(old_file) << "old bytes";
  fault_checkpoint_fs faults(engine::checkpoint_fs::posix(), dir.path());
  {
    const auto w = faults.create(dir.path() / "synced");
    w->append(std::as_bytes(std::span("12345", 5)));
    w->sync();
    w->append(std::as_bytes(std::span("678", 3)));  // never synced
  }
  faults.sync_directory(dir.path());
  {
    const auto w = faults.create(dir.path() / "named_later");
    w->append(std::as_bytes(std::span("x", 1)));
    w->sync();
  }
  faults.rename(dir.path() / "synced", old_file);  // over "old", folder never synced
  faults.crash_at(faults.operations());
  EXPECT_THROW(faults.sync_directory(dir.path()), simulated_crash);
  EXPECT_THROW((void)faults.exists(old_file), simulated_crash);
  faults.drop_unsynced();

  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"old", "synced"}));
  std::ifstream old_in(old_file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(old_in), {}), "old bytes");
  std::ifstream synced_in(dir.path() / "synced");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(synced_in), {}), "12345");
}

}  // namespace
}  // namespace zoe::testing
