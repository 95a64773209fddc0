// zoe-plan on fixture configurations: exit codes, the resolved keys with their sources, the
// plan's JSON, the shortfalls naming keys, and the missing swap path as a warning.
#include <gtest/gtest.h>

#include <string>

#include "child_process.hpp"

namespace zoe::testing {
namespace {

std::string fixture(const std::string& name) { return std::string(ZOE_PLAN_FIXTURES) + "/" + name; }

// zoe-plan with `args`; stderr to stdout when `with_stderr`, else dropped (so --json is one line).
run_result plan(const std::string& args, bool with_stderr = true) {
  return run_shell(std::string(ZOE_PLAN_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

nlohmann::json plan_json(const std::string& args, int& exit_code) {
  const auto r = plan(args + " --json", false);
  exit_code = r.exit_code;
  const auto lines = json_lines(r.output);
  EXPECT_EQ(lines.size(), 1U) << "one JSON object: " << r.output;
  return lines.empty() ? nlohmann::json::object() : lines[0];
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(zoe_plan, AFittingPlanExitsZeroAndPrintsEveryKeyWithItsSource) {
  const auto r = plan("--config " + fixture("cpu_offload.json") + " --params 1e6 --layers 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "zero_optimization.stage = 3 (file)")) << r.output;
  EXPECT_TRUE(contains(r.output, "zero_optimization.offload_param.device = \"cpu\" (file)")) << r.output;
  EXPECT_TRUE(contains(r.output, "aio.block_size = 1048576 (default)")) << "defaults are listed too";
  EXPECT_TRUE(contains(r.output, "1000000 parameters in 4 layers of fp16")) << r.output;
  EXPECT_TRUE(contains(r.output, "working in pageable host memory")) << r.output;
  EXPECT_TRUE(contains(r.output, "the plan fits this machine")) << r.output;
}

TEST(zoe_plan, APlanOverTheDeviceBudgetExitsOneNamingTheKeys) {
  const auto r = plan("--config " + fixture("device_only.json") + " --params 1e7 --layers 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "does NOT fit")) << r.output;
  EXPECT_TRUE(contains(r.output, "device memory: the plan needs")) << r.output;
  EXPECT_TRUE(contains(r.output, "zero_optimization.offload_param.device")) << r.output;
  EXPECT_TRUE(contains(r.output, "zoe.device.budget_bytes")) << r.output;
}

TEST(zoe_plan, JsonHoldsTheConfigThePlanAndTheWarnings) {
  int exit_code = -1;
  const auto j = plan_json("--config " + fixture("cpu_offload.json") + " --params 1e6 --layers 4", exit_code);
  EXPECT_EQ(exit_code, 0);
  ASSERT_TRUE(j.contains("config") && j.contains("plan") && j.contains("warnings")) << j.dump();
  EXPECT_EQ(j["config"]["zero_optimization"]["stage"], 3);
  EXPECT_EQ(j["config"]["zero_optimization"]["offload_param"]["device"], "cpu");
  EXPECT_EQ(j["config"]["aio"]["block_size"], 1048576) << "defaults included";
  EXPECT_TRUE(j["warnings"].is_array());
  const auto& p = j["plan"];
  EXPECT_EQ(p["fits"], true);
  EXPECT_TRUE(p["shortfalls"].empty());
  EXPECT_EQ(p["nvme_bytes"], 0);
  // 1e6 fp16 elements in 4 layers, each state at least that many elements: 18 bytes per element
  // (the gradient is fp32).
  EXPECT_GE(p["pageable_bytes"].get<std::uint64_t>(), 18'000'000U);
  EXPECT_GT(p["arena_bytes"].get<std::uint64_t>(), 0U);
  EXPECT_EQ(p["machine"]["device_budget"], 1073741824);
  std::uint64_t device = 0;
  std::uint64_t pageable = 0;
  for (const auto& item : p["items"]) {
    ASSERT_TRUE(item.contains("what") && item.contains("keys") && item.contains("bytes")) << item.dump();
    if (item["memory"] == "device") device += item["bytes"].get<std::uint64_t>();
    if (item["memory"] == "pageable host") pageable += item["bytes"].get<std::uint64_t>();
    // pin_memory false and nothing on nvme: the only pinned memory is the gradient path's staging,
    // through which the reduced gradients come to their pageable homes.
    if (item["memory"] == "pinned host") {
      EXPECT_EQ(item["what"], "gradient staging buffers");
      EXPECT_EQ(item["bytes"], p["pinned_bytes"]);
    }
  }
  EXPECT_GT(p["pinned_bytes"].get<std::uint64_t>(), 0U);
  EXPECT_EQ(device, p["device_bytes"].get<std::uint64_t>());
  EXPECT_EQ(pageable, p["pageable_bytes"].get<std::uint64_t>());
}

TEST(zoe_plan, TheWorldSizeShardsThePlan) {
  int one_rc = -1;
  int four_rc = -1;
  const auto one = plan_json("--config " + fixture("cpu_offload.json") + " --params 1e7 --layers 2", one_rc);
  const auto four =
      plan_json("--config " + fixture("cpu_offload.json") + " --params 1e7 --layers 2 --world-size 4", four_rc);
  const auto per_rank_one = one["plan"]["pageable_bytes"].get<std::uint64_t>();
  const auto per_rank_four = four["plan"]["pageable_bytes"].get<std::uint64_t>();
  EXPECT_LT(per_rank_four * 4, per_rank_one + per_rank_one / 100) << "a quarter, within padding";
  EXPECT_GE(per_rank_four * 4, per_rank_one);
  EXPECT_TRUE(contains(four["plan"]["model"].get<std::string>(), "world size 4"));
}

// The bytes of the first item whose name holds `what` (0 when none does).
std::uint64_t item_bytes(const nlohmann::json& plan, const std::string& what) {
  for (const auto& item : plan["items"]) {
    if (contains(item["what"].get<std::string>(), what)) return item["bytes"].get<std::uint64_t>();
  }
  return 0;
}

// Stages 1 and 2 as they run, on 4 ranks with 4 micro-batches: the optimizer states and the
// gradient state 1/N, the bf16 parameters whole on every rank (no stage-3 prefetch window), and at
// stage 1 only the whole fp32 gradient each rank accumulates.
TEST(zoe_plan, StagesOneAndTwoPlanWhatTheyReplicateAndPartition) {
  int rc1 = -1;
  int rc2 = -1;
  const std::string model = " --params 1e6 --layers 4 --world-size 4";
  const auto one = plan_json("--config " + fixture("stage1_offload.json") + model, rc1)["plan"];
  const auto two = plan_json("--config " + fixture("stage2_offload.json") + model, rc2)["plan"];
  EXPECT_EQ(rc1, 0);
  EXPECT_EQ(rc2, 0);
  for (const auto* p : {&one, &two}) {
    const std::uint64_t master = item_bytes(*p, "master in pinned host memory");
    EXPECT_GE(master * 4, 4'000'000U) << "a quarter of 1e6 fp32 elements, padded";
    EXPECT_LT(master * 4, 4'400'000U) << "within the layout's padding";
    EXPECT_EQ(item_bytes(*p, "gradient in pinned host memory"), master);
    const std::uint64_t replicated = item_bytes(*p, "16-bit parameters, replicated");
    EXPECT_GE(replicated, 2'000'000U) << "1e6 bf16 elements on every rank";
    EXPECT_EQ((*p)["arena_bytes"].get<std::uint64_t>(), replicated);
    EXPECT_EQ(item_bytes(*p, "largest module and prefetch"), 0U);
  }
  EXPECT_EQ(one["local_gradient_host_bytes"].get<std::uint64_t>(),
            4 * item_bytes(one, "gradient in pinned host memory"));
  EXPECT_EQ(item_bytes(one, "stage-1 gradient accumulation"), one["local_gradient_host_bytes"].get<std::uint64_t>());
  // Pageable besides: the optimizer step's scratch, which stages the new working copies on their
  // way to the device (ZeRO-Offload's layout logs no undo: optimizer_step.hpp).
  const auto step_bytes = [](const nlohmann::json& p) {
    return item_bytes(p, "optimizer step undo log") + item_bytes(p, "optimizer step scratch");
  };
  EXPECT_EQ(item_bytes(two, "optimizer step undo log"), 0U);
  EXPECT_GT(item_bytes(two, "optimizer step scratch"), 0U);
  EXPECT_EQ(one["pageable_bytes"].get<std::uint64_t>(),
            one["local_gradient_host_bytes"].get<std::uint64_t>() + step_bytes(one));
  EXPECT_EQ(two["local_gradient_host_bytes"].get<std::uint64_t>(), 0U);
  EXPECT_EQ(two["pageable_bytes"].get<std::uint64_t>(), step_bytes(two));
}

// Stage 0 on 4 ranks: every rank holds a full replica, the fp32 states of all 1e6 elements (on the
// device: offload_optimizer does nothing at stage 0, which a warning says), and with 4 micro-batches
// the whole fp32 gradient it accumulates before the step's one all-reduce; otherwise the plan is
// one rank's. The model line says the states are whole on every rank.
TEST(zoe_plan, StageZeroPlansAFullReplicaOnEveryRank) {
  int rc4 = -1;
  int rc1 = -1;
  const std::string args = "--config " + fixture("stage0_offload.json") + " --params 1e6 --layers 4";
  const auto j = plan_json(args + " --world-size 4", rc4);
  const auto& four = j["plan"];
  const auto one = plan_json(args, rc1)["plan"];
  EXPECT_EQ(rc4, 0);
  EXPECT_EQ(rc1, 0);
  EXPECT_TRUE(contains(four["model"].get<std::string>(), "world size 4, every rank holding every state whole"))
      << four["model"];
  for (const char* state : {"gradient", "master", "exp_avg", "exp_avg_sq"}) {
    const std::uint64_t whole = item_bytes(four, std::string(state) + " in device memory");
    EXPECT_GE(whole, 4'000'000U) << state << ": 1e6 fp32 elements on every rank";
    EXPECT_LT(whole, 4'400'000U) << state << ": within the layout's padding";
    EXPECT_EQ(whole, item_bytes(one, std::string(state) + " in device memory")) << state;
    EXPECT_EQ(item_bytes(four, std::string(state) + " in pinned host memory"), 0U) << state;
  }
  const std::uint64_t accumulated = item_bytes(four, "stage-0 gradient accumulation, whole on every rank");
  EXPECT_GE(accumulated, 4'000'000U);
  EXPECT_EQ(item_bytes(one, "stage-0 gradient accumulation"), 0U) << "one rank reduces nothing";
  EXPECT_EQ(four["device_bytes"].get<std::uint64_t>(), one["device_bytes"].get<std::uint64_t>() + accumulated);
  bool warned = false;
  for (const auto& w : j["warnings"])
    warned |= contains(w.get<std::string>(), "offload_optimizer is ignored at stage 0");
  EXPECT_TRUE(warned) << j["warnings"].dump();

  const auto text = plan(args + " --world-size 4");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_TRUE(contains(text.output, "every rank holding every state whole")) << text.output;
  EXPECT_TRUE(contains(text.output, "stage-0 gradient accumulation")) << text.output;
}

TEST(zoe_plan, AMissingSwapPathIsAWarningNotAShortfall) {
  int exit_code = -1;
  const auto j = plan_json("--config " + fixture("nvme_missing_path.json") + " --params 1e7 --layers 4", exit_code);
  const auto& p = j["plan"];
  EXPECT_EQ(exit_code, p["fits"].get<bool>() ? 0 : 1) << "the exit code is the verdict";
  bool warned = false;
  for (const auto& w : j["warnings"]) warned |= contains(w.get<std::string>(), "/nonexistent/zoe-plan-fixture");
  EXPECT_TRUE(warned) << j["warnings"].dump();
  for (const auto& s : p["shortfalls"]) EXPECT_FALSE(contains(s.get<std::string>(), "zoe-plan-fixture")) << s;
  ASSERT_EQ(p["machine"]["disk_free"].size(), 1U);
  EXPECT_TRUE(p["machine"]["disk_free"][0]["free_bytes"].is_null());
  EXPECT_GT(p["nvme_bytes"].get<std::uint64_t>(), 0U);
  EXPECT_EQ(p["param_buffer_count"], 2);
  EXPECT_EQ(p["param_buffer_bytes"], 2'002'944) << "1e6 bf16 elements in whole pages";
  EXPECT_EQ(p["swap_paths"], nlohmann::json::array({"/nonexistent/zoe-plan-fixture"}));
  // The parameter swap buffers are the mover's pool, in 1 MiB slots: 2 x 2'002'944 bytes hold 3.
  bool pool = false;
  for (const auto& item : p["items"]) {
    if (!item.contains("pool")) continue;
    pool = true;
    EXPECT_EQ(item["what"], "parameter swap buffers");
    EXPECT_EQ(item["pool"]["key"], "mover.params");
    EXPECT_EQ(item["pool"]["slot_bytes"], 1048576);
    EXPECT_EQ(item["pool"]["slot_count"], 3);
  }
  EXPECT_TRUE(pool) << p["items"].dump();

  const auto text = plan("--config " + fixture("nvme_missing_path.json") + " --params 1e7 --layers 4");
  EXPECT_TRUE(contains(text.output, "warning: swap path '/nonexistent/zoe-plan-fixture' does not exist"))
      << text.output;
  EXPECT_TRUE(contains(text.output, "parameter swap buffers (mover.params: 3 slots of 1 MiB)")) << text.output;
}

TEST(zoe_plan, ConfigAndUsageErrorsExitTwo) {
  const auto syntax = plan("--config " + fixture("syntax_error.json") + " --params 1e6");
  EXPECT_EQ(syntax.exit_code, 2) << syntax.output;
  EXPECT_TRUE(contains(syntax.output, "syntax_error.json:4:")) << "a syntax error names its line: " << syntax.output;

  const auto missing = plan("--config /nonexistent/zoe.json --params 1e6");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, "/nonexistent/zoe.json")) << missing.output;

  const std::string good = "--config " + fixture("cpu_offload.json");
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {good + " --params 0", "--params"},
           {good + " --params seven", "--params"},
           {good + " --params 1.5", "--params"},
           {good + " --params -1", "--params"},
           {good + " --params 0x10", "--params"},  // std::stod reads hex: 16
           {good + " --params 0x1p20", "--params"},
           {good + " --params 1e6 --layers 0x2", "--layers"},
           {good + " --params 3 --layers 2", "--layers"},
           {good + " --params 1e6 --world-size 0", "--world-size"},
           {good + " --params 1e6 --world-size 1e18", "--world-size"},  // the padded shards overflow
           {good + " --params 1e6 --frobnicate", "frobnicate"},
           {"--params 1e6", "--config"},
       }) {
    const auto r = plan(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_TRUE(contains(r.output, named)) << args << ": " << r.output;
  }
}

TEST(zoe_plan, HelpDescribesTheModel) {
  const auto r = plan("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "a weight and a bias")) << r.output;
  EXPECT_TRUE(contains(r.output, "Exit 0 when the plan fits")) << r.output;
}

}  // namespace
}  // namespace zoe::testing
