// libFuzzer target: the checkpoint manifest and loader (fuzz/entries/checkpoint_entry.cpp). One
// engine serves every input; ZOE_FUZZ_WRITE_SEED=<file> writes its own saved checkpoint as an
// input there first (how fuzz/corpus/checkpoint/saved was made).
#include <cstdlib>
#include <fstream>

#include "checkpoint_entry.hpp"

namespace {
zoe::fuzz::checkpoint_target& target() {
  static zoe::fuzz::checkpoint_target t;
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  setenv("ZOE_LOG_LEVEL", "error", 0);
  if (const char* seed = std::getenv("ZOE_FUZZ_WRITE_SEED")) {
    const std::vector<std::uint8_t> bytes = target().saved_input();
    std::ofstream(seed, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),  // NOLINT
               static_cast<std::streamsize>(bytes.size()));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)target().run({data, size});
  return 0;
}
