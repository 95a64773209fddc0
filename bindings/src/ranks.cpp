// A data-parallel caller's view of the ranks: where it stands (the launcher's environment before an
// engine, the engine's communicator after), a host-side sum over the ranks for its own figures
// (the loss), and the bytes the engine's collectives sent within and across nodes.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::bindings {
namespace {

// An environment variable holding an unsigned number; nullopt when unset; usage_error naming it
// when it holds anything else.
std::optional<std::uint32_t> environment_number(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (v[0] == '\0' || v[0] == '-' || *end != '\0' || errno != 0 || x > std::numeric_limits<std::uint32_t>::max()) {
    throw usage_error(str("the environment variable ", name, " is '", v, "', not a rank or a count"));
  }
  return static_cast<std::uint32_t>(x);
}

void fill(zoe_ranks& out, std::uint32_t rank, std::uint32_t size, std::uint32_t per_node) {
  out.rank = rank;
  out.world_size = size;
  out.ranks_per_node = per_node;
  out.node = rank / per_node;
  out.local_rank = rank % per_node;
  out.nodes = size / per_node;
}

// A count or rank of a communicator as the struct's type (a world of 2^32 ranks is not one).
std::uint32_t narrow(std::size_t x) { return static_cast<std::uint32_t>(x); }

}  // namespace

engine::comm_stats engine_traffic(zoe_engine& e) {
  // The engine's two worlds: the coordinator's gathers, and the gradient path's reductions with the
  // step's collectives; each with its sub-groups (node-local, cross-node, hpZ).
  engine::parameter_path& path = e.engine->parameters();
  engine::comm_stats s = engine::total_stats(path.comm());
  s += engine::total_stats(path.gradient_comm());
  return s;
}

}  // namespace zoe::bindings

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_launcher_ranks(zoe_ranks* ranks) {
  return guarded("zoe_launcher_ranks", [&] {
    zoe::bindings::expect_struct(ranks, ZOE_FIELDS_END(zoe_ranks, nodes), "zoe_ranks");
    using zoe::bindings::environment_number;
    // Open MPI's names first: mpirun sets both families under some PMIx setups, alike.
    const bool ompi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
    const char* rank_name = ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK";
    const char* size_name = ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE";
    const std::uint32_t size = environment_number(size_name).value_or(1);
    const std::uint32_t rank = environment_number(rank_name).value_or(0);
    if (size == 0 || rank >= size) {
      throw zoe::usage_error(zoe::str("the launcher's environment gives rank ", rank, " (", rank_name, ") of ", size,
                                      " (", size_name, "): the rank must be below the size"));
    }
    std::uint32_t per_node = size;
    if (ompi) {
      const std::uint32_t local = environment_number("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(size);
      // A launch whose nodes hold different numbers of ranks has no one ranks_per_node: the
      // whole world then counts as one group, as zoe would refuse to split it.
      if (local > 0 && size % local == 0) per_node = local;
    }
    zoe::bindings::fill(*ranks, rank, size, per_node);
  });
}

zoe_status zoe_engine_ranks(const zoe_engine* engine, zoe_ranks* ranks) {
  return guarded("zoe_engine_ranks", [&] {
    const zoe_engine& e = live(engine, "engine");
    zoe::bindings::expect_struct(ranks, ZOE_FIELDS_END(zoe_ranks, nodes), "zoe_ranks");
    zoe::engine::communicator& world = *e.caller_world;
    using zoe::bindings::narrow;
    zoe::bindings::fill(*ranks, narrow(world.rank()), narrow(world.size()), narrow(world.node_local().size()));
  });
}

zoe_status zoe_all_reduce_sum(zoe_engine* engine, double* values, size_t count) {
  return guarded("zoe_all_reduce_sum", [&] {
    zoe_engine& e = live(engine, "engine");
    if (count > 0) expect_pointer(values, "values");
    zoe::engine::communicator& world = *e.caller_world;
    const std::size_t size = world.size();
    const std::size_t rank = world.rank();
    if (size == 1) return;
    if (count > std::numeric_limits<std::size_t>::max() / 2 / sizeof(double) / size) {
      throw zoe::usage_error(zoe::str("count ", count, " doubles times ", size, " ranks overflows"));
    }
    zoe::device& dev = *e.device->dev;
    const zoe::stream_view stream = e.caller_stream.view();
    // Each rank's count first (count 0 too), so a mismatch fails on every rank with the counts
    // named instead of a transfer of mismatched sizes.
    std::vector<std::uint64_t> counts(size, 0);
    counts[rank] = count;
    const std::size_t count_bytes = size * sizeof(std::uint64_t);
    const std::size_t value_bytes = size * count * sizeof(double);
    // Device memory for both gathers: the communicator moves device buffers only.
    const std::size_t bytes = count_bytes + value_bytes;
    void* buffer = dev.allocate(bytes, stream);
    struct freed {
      zoe::device& dev;
      void* p;
      std::size_t bytes;
      zoe::stream_view stream;
      ~freed() { dev.deallocate(p, bytes, stream); }
    } guard{dev, buffer, bytes, stream};
    auto* base = static_cast<std::byte*>(buffer);
    dev.copy_async(base + rank * sizeof(std::uint64_t), &counts[rank], sizeof(std::uint64_t),
                   zoe::copy_kind::host_to_device, stream);
    world.all_gather(base + rank * sizeof(std::uint64_t), base, sizeof(std::uint64_t), stream);
    dev.copy_async(counts.data(), base, count_bytes, zoe::copy_kind::device_to_host, stream);
    dev.synchronize(stream);
    for (std::size_t r = 0; r < size; ++r) {
      if (counts[r] != count) {
        std::string all;
        for (std::size_t k = 0; k < size; ++k) all += zoe::str(k == 0 ? "" : ", ", "rank ", k, ": ", counts[k]);
        throw zoe::usage_error(zoe::str("the ranks pass different counts (", all, "); every rank must pass the same"));
      }
    }
    if (count == 0) return;
    // The values by all-gather, then summed in rank order on the host: exact, and the same bits on
    // every rank (a reduction's order inside a transport is its own).
    std::byte* gathered = base + count_bytes;
    const std::size_t part = count * sizeof(double);
    dev.copy_async(gathered + rank * part, values, part, zoe::copy_kind::host_to_device, stream);
    world.all_gather(gathered + rank * part, gathered, part, stream);
    std::vector<double> all(size * count);
    dev.copy_async(all.data(), gathered, value_bytes, zoe::copy_kind::device_to_host, stream);
    dev.synchronize(stream);
    for (std::size_t i = 0; i < count; ++i) {
      double sum = 0.0;
      for (std::size_t r = 0; r < size; ++r) sum += all[r * count + i];
      values[i] = sum;
    }
  });
}

zoe_status zoe_engine_traffic(zoe_engine* engine, zoe_comm_traffic* traffic) {
  return guarded("zoe_engine_traffic", [&] {
    zoe_engine& e = live(engine, "engine");
    zoe::bindings::expect_struct(traffic, ZOE_FIELDS_END(zoe_comm_traffic, collectives), "zoe_comm_traffic");
    const zoe::engine::comm_stats s = zoe::bindings::engine_traffic(e);
    const zoe::engine::traffic t = s.total();
    traffic->intra_node_bytes = t.intra_node;
    traffic->inter_node_bytes = t.inter_node;
    traffic->collectives = s.calls;
  });
}

}  // extern "C"
