// A program run under mpirun by mpi_failure_driver.cmake: every rank trains the engine rig's small
// model on the mpi backend, and the victim dies (SIGKILL) in its first backward module, after the
// module's fetch and before its gradients are reduced. Each survivor must fail naming it within
// zoe.comm.timeout_s, and prints one line the driver checks:
//   zoe-mpi-probe rank <R> failed after <S> s: <message>
//   usage: engine_kill_probe kill VICTIM TIMEOUT_MS
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string_view>

#include "engine_rig.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/engine.hpp"

namespace {

int probe(std::size_t victim, std::chrono::milliseconds timeout) {
  using namespace zoe;
  zoe::testing::scratch_dir dir;
  const std::unique_ptr<device> dev = make_host_device(std::uint64_t{256} << 20);
  engine::engine_config c = zoe::testing::config_on("host", dir.path());
  c.zoe.comm.backend = "mpi";
  c.zoe.comm.timeout_s = static_cast<double>(timeout.count()) / 1000.0;
  std::size_t rank = 0;
  auto start = std::chrono::steady_clock::now();
  try {
    engine::offload_engine e(zoe::testing::small_model(kernels::dtype::fp32), c, *dev);
    rank = e.resources().comm().rank();
    for (const engine::parameter_layout& p : e.layout().parameters()) {
      e.set_parameter(p.id, std::vector<float>(p.numel, 0.5F));
    }
    start = std::chrono::steady_clock::now();
    for (int step = 0; step < 2; ++step) {
      zoe::testing::run_micro_batch(e, *dev, zoe::testing::gradients(e.layout(), 7), [&](engine::module_id) {
        if (rank == victim) std::raise(SIGKILL);
      });
      (void)e.step(1e-3);
    }
    std::printf("zoe-mpi-probe rank %zu: no failure\n", rank);
    return 1;
  } catch (const std::exception& ex) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("zoe-mpi-probe rank %zu failed after %.1f s: %s\n", rank, seconds, ex.what());
    std::fflush(stdout);
    // Out at once: the engine's and MPI's teardown would wait on the dead rank's part.
    std::_Exit(0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::string_view(argv[1]) != "kill") {
    std::fprintf(stderr, "usage: %s kill VICTIM TIMEOUT_MS\n", argv[0]);
    return 2;
  }
  return probe(std::strtoul(argv[2], nullptr, 10), std::chrono::milliseconds(std::strtol(argv[3], nullptr, 10)));
}
