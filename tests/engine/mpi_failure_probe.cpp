// A program run under mpirun by mpi_failure_driver.cmake: every rank starts an all-gather, and one
// rank (the victim) fails to take part: it skips it (`skip`), dies in it (`kill`), or throws past
// its communicator instead (`throw`: the others hear of it at once, long before the timeout); or
// every rank but the victim makes a second world (`create`: make_communicator is collective too,
// and must fail naming the victim within the timeout rather than hang in MPI_Comm_dup); or every
// rank makes a second world with zoe.ranks_per_node 2 and zero_hpz_partition_size 2 but the victim
// with 4 for one of them (`ranks_per_node`, `hpz`: the ranks would split the world differently, so
// every rank, the victim too, must refuse the mismatch rather than hang in MPI_Comm_split). Each
// rank that sees its collective fail prints one line
//   zoe-mpi-probe rank <R> failed after <S> s: <message>
// which the driver checks names the victim, within the timeout.
//   usage: mpi_failure_probe skip|kill|throw|create|ranks_per_node|hpz VICTIM TIMEOUT_MS
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace {

int probe(std::string_view scenario, std::size_t victim, std::chrono::milliseconds timeout) {
  using namespace zoe;
  const std::unique_ptr<device> dev = make_host_device(std::uint64_t{1} << 30);
  const device_stream stream = dev->create_stream();
  engine::comm_options options;
  options.backend = "mpi";
  options.timeout = timeout;
  const auto comm = engine::make_communicator(*dev, options);
  const std::size_t rank = comm->rank();
  comm->barrier();  // everyone is up before the victim fails
  // 1 MiB per rank: large enough that MPI sends it by rendezvous, so the victim dies mid-transfer.
  const std::size_t bytes = std::size_t{1} << 20;
  std::vector<std::byte> send(bytes, std::byte{1});
  std::vector<std::byte> recv(bytes * comm->size());
  const auto start = std::chrono::steady_clock::now();
  try {
    if (rank == victim && scenario == "throw") {
      // Unwinds past `comm`, whose destructor tells the others; main reports it.
      throw std::runtime_error("the victim gave up");
    }
    if (scenario == "create") {
      // The victim stays away (out of MPI) past the others' timeout, so their creation's own wait
      // must name it; then its barrier fails on their notice.
      if (rank == victim) {
        std::this_thread::sleep_for(2 * timeout);
        comm->barrier();
      } else {
        (void)engine::make_communicator(*dev, options);
      }
    } else if (scenario == "ranks_per_node" || scenario == "hpz") {
      engine::comm_options mine = options;
      mine.ranks_per_node = 2;
      mine.hpz_partition_size = 2;
      if (rank == victim) (scenario == "hpz" ? mine.hpz_partition_size : mine.ranks_per_node) = 4;
      (void)engine::make_communicator(*dev, mine);
    } else if (rank == victim && scenario == "skip") {
      comm->barrier();  // the others are in the all-gather: this fails once they give up
    } else {
      comm->all_gather(send.data(), recv.data(), bytes, stream.view());
      if (rank == victim) std::raise(SIGKILL);
      dev->synchronize(stream.view());
    }
    std::printf("zoe-mpi-probe rank %zu: no failure\n", rank);
    return 1;
  } catch (const zoe::error& e) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("zoe-mpi-probe rank %zu failed after %.1f s: %s\n", rank, seconds, e.what());
    std::fflush(stdout);
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s skip|kill|throw|create|ranks_per_node|hpz VICTIM TIMEOUT_MS\n", argv[0]);
    return 2;
  }
  try {
    return probe(argv[1], std::strtoul(argv[2], nullptr, 10),
                 std::chrono::milliseconds(std::strtol(argv[3], nullptr, 10)));
  } catch (const std::exception& e) {
    std::printf("zoe-mpi-probe victim: %s\n", e.what());
    return 0;
  }
}
