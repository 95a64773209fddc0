#pragma once
// The checkpoint fuzz target's entry (zoe_fuzz_c_entries, over the C API alone).

#include <cstdint>
#include <memory>
#include <span>

#include "entry.hpp"

namespace zoe::fuzz {

/// The checkpoint manifest and loader on a real folder. Holds one engine (host device, a small
/// model, optimizer states partly on NVMe in a scratch folder it owns) for all inputs; each input
/// becomes the files of a checkpoint folder (fuzz/README.md gives the format) that the engine then
/// loads. Not thread-safe.
class checkpoint_target {
 public:
  checkpoint_target();
  ~checkpoint_target();
  checkpoint_target(const checkpoint_target&) = delete;
  checkpoint_target& operator=(const checkpoint_target&) = delete;

  /// accepted: the load succeeded. After a load that succeeded or failed the engine must still
  /// take a step (checked here).
  outcome run(std::span<const std::uint8_t> bytes);

  /// The engine's own checkpoint, saved now, as an input that run() loads (the seed of the corpus).
  [[nodiscard]] std::vector<std::uint8_t> saved_input();

 private:
  struct rig;
  std::unique_ptr<rig> rig_;
};

}  // namespace zoe::fuzz
