// libFuzzer target: the config reader (fuzz/entries/config_entry.cpp).
#include <cstdlib>

#include "config_entry.hpp"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  setenv("ZOE_LOG_LEVEL", "error", 0);  // the warnings of every input would cost more than the parse
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)zoe::fuzz::run_config({data, size});
  return 0;
}
