// A program that links zoe as an installed package (find_package(zoe) or pkg-config), as a user's
// training code would: it must configure, link every library, and run on a machine without a GPU.
// It uses each library, so a static link needs every dependency the package names, and checks
// what it gets back: bytes written through the I/O engine from pinned memory read back the same,
// values a half can hold survive a cast to fp16 and back, and a DeepSpeed config parses to the
// values it names.
#include <zoe/allocators/pinned_host_resource.hpp>
#include <zoe/core/device.hpp>
#include <zoe/core/gpu_probe.hpp>
#include <zoe/core/units.hpp>
#include <zoe/engine/config/parse.hpp>
#include <zoe/io/engine_factory.hpp>
#include <zoe/io/file.hpp>
#include <zoe/kernels/cast.hpp>

#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <span>

namespace {

// Writes a pattern to an unlinked file and reads it back; true when the bytes match.
bool io_round_trip(zoe::allocators::pinned_host_resource& pinned, std::string& backend) {
  const auto out = pinned.allocate(64 * zoe::KiB);
  const auto in = pinned.allocate(64 * zoe::KiB);
  for (std::size_t i = 0; i < out.size(); ++i) out.data()[i] = static_cast<std::byte>(i * 7 + 1);
  zoe::io::file f(std::filesystem::temp_directory_path() / "zoe-consumer.dat", zoe::io::open_mode::read_write,
                  {.create = true, .unlinked = true});
  const auto engine = zoe::io::make_engine("auto", {});
  backend = engine->backend_name();
  const zoe::io::io_request write{zoe::io::io_op::write, &f, out.span(), 0, 0};
  engine->run(std::span(&write, 1));
  const zoe::io::io_request read{zoe::io::io_op::read, &f, in.span(), 0, 0};
  engine->run(std::span(&read, 1));
  return std::memcmp(out.data(), in.data(), out.size()) == 0;
}

bool cast_round_trip() {
  const float values[] = {0.5f, -2.0f, 1024.0f, 0.0f, 3.25f};
  std::uint16_t half[5] = {};
  float back[5] = {};
  zoe::kernels::cast(zoe::kernels::view(std::span<const float>(values)),
                     zoe::kernels::view(std::span<std::uint16_t>(half), zoe::kernels::dtype::fp16));
  zoe::kernels::cast(zoe::kernels::view(std::span<const std::uint16_t>(half), zoe::kernels::dtype::fp16),
                     zoe::kernels::view(std::span<float>(back)));
  return std::memcmp(values, back, sizeof values) == 0;
}

// The engine library reads a DeepSpeed ZeRO-3 NVMe block as DeepSpeed would.
bool config_parses() {
  const auto loaded = zoe::engine::parse_config(
      R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"}}})");
  return loaded.config.zero.stage == 3 && loaded.config.zero.offload_param &&
         loaded.config.zero.offload_param->device == zoe::engine::offload_device::nvme &&
         loaded.config.zero.offload_param->buffer_count == 5;
}

}  // namespace

int main() {
  try {
    const auto dev = zoe::make_host_device(zoe::GiB);
    zoe::allocators::pinned_host_resource pinned(*dev);
    std::string backend;
    const bool io_ok = io_round_trip(pinned, backend);
    const bool cast_ok = cast_round_trip();
    const bool config_ok = config_parses();
    std::cout << "zoe consumer: I/O backend " << backend
              << (io_ok ? ", round trip intact" : ", round trip CHANGED DATA") << "; fp16 cast "
              << (cast_ok ? "exact" : "CHANGED VALUES") << "; config " << (config_ok ? "read" : "MISREAD")
              << "; GPU: " << zoe::probe_gpu().reason << "\n";
    return io_ok && cast_ok && config_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "zoe consumer: " << e.what() << "\n";
    return 1;
  }
}
