// A program that links zoe as an installed C++ package (find_package(zoe)), as a user's training
// code would: it must configure, link every library, and run on a machine without a GPU.
#include <zoe/core/gpu_probe.hpp>
#include <zoe/core/units.hpp>
#include <zoe/io/engine_factory.hpp>

#include <iostream>

int main() {
  const auto engine = zoe::io::make_engine("auto", {});
  const auto gpu = zoe::probe_gpu();
  std::cout << "zoe consumer: I/O backend " << engine->backend_name() << ", GPU: " << gpu.reason << ", "
            << zoe::format_bytes(zoe::GiB) << "\n";
  return engine->backend_name().empty() ? 1 : 0;
}
