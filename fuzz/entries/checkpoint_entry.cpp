// checkpoint_target: the fuzzer's bytes become the files of a checkpoint folder, which a live
// engine then loads through the C API.
//
// Input format (fuzz/README.md): one flags byte, then records [selector: 1 byte][length: 2 bytes,
// little-endian][length bytes] until the input ends (a short last record takes what is left). The
// selector picks the file (checkpoint_files below, modulo their count); a later record for the same
// file replaces an earlier one. Flags: bit 0, set each files[i].xxh3 of the manifest to the XXH3 of
// the file the entry names, when the input holds it; bit 1, then recompute the manifest's own
// checksum (manifest_xxh3); bit 2, load by tag rather than through `latest`. The two repairs let
// mutations reach past the checksums into the sizes, the model check and the state loads, as a
// format fuzzer repairs a CRC.

#include <xxhash.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "c_api_checks.hpp"
#include "checkpoint_entry.hpp"
#include "fuzz_input.hpp"
#include "scratch_folder.hpp"
#include "zoe/core/str.hpp"

namespace zoe::fuzz {
namespace {

constexpr const char* tag = "fuzz";
/// The files an input may write, relative to the checkpoint root.
constexpr std::array<const char*, 6> checkpoint_files = {"fuzz/manifest.json", "fuzz/working.bin",    "fuzz/master.bin",
                                                         "fuzz/exp_avg.bin",   "fuzz/exp_avg_sq.bin", "latest"};
constexpr std::uint8_t repair_file_checksums = 1;
constexpr std::uint8_t repair_manifest_checksum = 2;
constexpr std::uint8_t load_by_tag = 4;

std::string hex(std::uint64_t hash) {
  char text[17] = {};
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));  // NOLINT
  return text;
}

std::uint64_t xxh3(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

/// The manifest with the repairs `flags` asks for; unchanged when it is not a JSON object.
std::string repaired(const std::string& manifest, std::uint8_t flags, const std::map<std::string, std::string>& files) {
  using json = nlohmann::ordered_json;
  json j = json::parse(manifest, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return manifest;
  if ((flags & repair_file_checksums) != 0 && j.contains("files") && j["files"].is_array()) {
    for (json& f : j["files"]) {
      if (!f.is_object() || !f.contains("file") || !f["file"].is_string()) continue;
      const auto held = files.find(str("fuzz/", f["file"].get<std::string>()));
      if (held != files.end()) f["xxh3"] = hex(xxh3(held->second));
    }
  }
  if ((flags & repair_manifest_checksum) != 0) {
    // As manifest.cpp computes it: the XXH3 of the text without the field, dumped with indent 1.
    j.erase("manifest_xxh3");
    j["manifest_xxh3"] = hex(xxh3(j.dump(1)));
  }
  return j.dump(1) + "\n";
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error(str("cannot write '", path.string(), "'"));
}

std::string read_text(const std::filesystem::path& path) {
  const std::vector<std::uint8_t> bytes = read_input(path);
  return std::string(as_text(bytes));
}

}  // namespace

/// The engine every input is loaded into, and the folders it uses.
struct checkpoint_target::rig {
  scratch_folder scratch;
  std::filesystem::path swap = scratch.path() / "swap";
  std::filesystem::path root = scratch.path() / "checkpoints";
  zoe_device* device = nullptr;
  zoe_stream* stream = nullptr;
  zoe_model* model = nullptr;
  zoe_engine* engine = nullptr;
  std::uint32_t modules = 0;

  rig() {
    std::filesystem::create_directories(swap);
    must_succeed(zoe_model_create(&model), "zoe_model_create");
    // fp16 and bf16 working copies (a working file) and an fp32 scalar (none of its own), each
    // padded to a whole layout granule in its shard; small, so the seed input is too.
    add_module("embed", {{"table", {40}, ZOE_FP16}, {"scale", {}, ZOE_FP32}});
    add_module("head", {{"weight", {5, 3}, ZOE_BF16}});
    zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
    o.kind = ZOE_DEVICE_HOST;
    o.budget_bytes = std::uint64_t{64} << 20;
    must_succeed(zoe_device_create(&o, &device), "zoe_device_create");
    must_succeed(zoe_stream_create(device, &stream), "zoe_stream_create");
    // The optimizer states on NVMe, the working copies in pinned host memory: a load writes both
    // kinds of home.
    const std::string config =
        str(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},)",
            R"( "offload_optimizer": {"device": "nvme", "nvme_path": ")", swap.string(), R"("}},)",
            R"( "aio": {"block_size": 65536}, "fp16": {"enabled": true, "initial_scale_power": 4},)",
            R"( "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},)",
            R"( "zoe": {"device": {"kind": "host"}, "swap": {"engine": "posix"}}})");
    zoe_engine_desc desc = ZOE_ENGINE_DESC_INIT;
    desc.config_json = config.c_str();
    desc.model = model;
    desc.device = device;
    must_succeed(zoe_engine_create(&desc, &engine), "zoe_engine_create");
  }

  ~rig() {
    if (engine != nullptr) zoe_engine_destroy(engine);
    if (stream != nullptr) zoe_stream_destroy(stream);
    if (device != nullptr) zoe_device_destroy(device);
    if (model != nullptr) zoe_model_destroy(model);
  }
  rig(const rig&) = delete;
  rig& operator=(const rig&) = delete;

  struct parameter {
    const char* name;
    std::vector<std::uint64_t> shape;
    zoe_dtype dtype;
  };
  void add_module(const char* name, const std::vector<parameter>& parameters) {
    zoe_module_id id = 0;
    must_succeed(zoe_model_add_module(model, name, &id), "zoe_model_add_module");
    for (const parameter& p : parameters) {
      zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
      d.name = p.name;
      d.ndim = p.shape.size();
      d.shape = p.shape.data();
      d.dtype = p.dtype;
      d.init = ZOE_INIT_UNIFORM;
      d.scale = 0.5F;
      d.seed = 7;
      zoe_parameter_id unused = 0;
      must_succeed(zoe_model_add_parameter(model, id, &d, &unused), "zoe_model_add_parameter");
    }
    ++modules;
  }

  /// One step of one micro-batch with zero gradients: whatever a load did, the engine must run.
  void step() {
    must_succeed(zoe_begin_micro_batch(engine), "zoe_begin_micro_batch");
    for (zoe_module_id m = 0; m < modules; ++m) {
      must_succeed(zoe_fetch(engine, m, ZOE_PASS_BACKWARD, stream), "zoe_fetch");
      std::array<void*, 2> buffers{};
      must_succeed(zoe_module_gradients(engine, m, stream, buffers.data(), m == 0 ? 2 : 1), "zoe_module_gradients");
      must_succeed(zoe_reduce_gradients(engine, m, stream), "zoe_reduce_gradients");
      must_succeed(zoe_release(engine, m, stream), "zoe_release");
    }
    must_succeed(zoe_end_micro_batch(engine), "zoe_end_micro_batch");
    zoe_step_result result = ZOE_STEP_RESULT_INIT;
    must_succeed(zoe_step(engine, 0.01, &result), "zoe_step");
  }
};

checkpoint_target::checkpoint_target() : rig_(std::make_unique<rig>()) {}
checkpoint_target::~checkpoint_target() = default;

outcome checkpoint_target::run(std::span<const std::uint8_t> bytes) {
  fuzz_input in(bytes);
  const std::uint8_t flags = in.byte();
  std::map<std::string, std::string> files;
  while (!in.empty()) {
    const char* name = checkpoint_files[in.byte() % checkpoint_files.size()];
    const std::uint16_t length = in.u16();
    files[name] = std::string(as_text(in.take(length)));
  }
  const auto manifest = files.find(checkpoint_files[0]);
  if (manifest != files.end()) manifest->second = repaired(manifest->second, flags, files);

  std::filesystem::remove_all(rig_->root);
  std::filesystem::create_directories(rig_->root / tag);
  for (const auto& [name, content] : files) write_file(rig_->root / name, content);

  const bool loaded =
      succeeded(zoe_checkpoint_load(rig_->engine, rig_->root.c_str(), (flags & load_by_tag) != 0 ? tag : nullptr),
                "zoe_checkpoint_load");
  rig_->step();
  return loaded ? outcome::accepted : outcome::refused;
}

std::vector<std::uint8_t> checkpoint_target::saved_input() {
  std::filesystem::remove_all(rig_->root);
  must_succeed(zoe_checkpoint_save(rig_->engine, rig_->root.c_str(), tag), "zoe_checkpoint_save");
  std::vector<std::uint8_t> out = {load_by_tag};
  for (std::size_t i = 0; i < checkpoint_files.size(); ++i) {
    const std::filesystem::path path = rig_->root / checkpoint_files[i];
    if (!std::filesystem::exists(path)) continue;
    const std::string content = read_text(path);
    if (content.size() > 0xffff) throw std::runtime_error(str("'", path.string(), "' is too large for a record"));
    out.push_back(static_cast<std::uint8_t>(i));
    out.push_back(static_cast<std::uint8_t>(content.size() & 0xff));
    out.push_back(static_cast<std::uint8_t>(content.size() >> 8));
    out.insert(out.end(), content.begin(), content.end());
  }
  return out;
}

}  // namespace zoe::fuzz
