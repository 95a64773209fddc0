// libFuzzer target: sequences of C API calls (fuzz/entries/c_api_entry.cpp).
#include <cstdlib>

#include "c_api_entry.hpp"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  setenv("ZOE_LOG_LEVEL", "error", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)zoe::fuzz::run_c_api({data, size});
  return 0;
}
