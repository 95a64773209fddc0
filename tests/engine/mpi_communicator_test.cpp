// The mpi communicator under mpirun (label mpi; one CTest entry per case and rank count): every
// collective against a reference each rank computes locally, for sizes that divide nothing, every
// dtype and op, every root; the sub-groups of 4 ranks as 2 nodes of 2; the measured byte counters
// against the test's own arithmetic (and bytes_to()); and the refusals of sizes that do not fit the world.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {
namespace {

using kernels::dtype;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr std::size_t odd_sizes[] = {1, 7, 4097};

comm_options mpi_options(std::size_t ranks_per_node = 0, std::size_t hpz = 1) {
  comm_options o;
  o.backend = "mpi";
  o.ranks_per_node = ranks_per_node;
  o.hpz_partition_size = hpz;
  o.timeout = 60s;
  return o;
}

// A value that differs per rank, element and call, and is not exact in binary (so the order of
// additions shows in the bits).
float value(std::size_t rank, std::size_t i, std::size_t salt) {
  return static_cast<float>((rank * 131 + i * 7 + salt * 17) % 997) * 0.013F - 6.1F;
}

std::uint16_t to_bits(dtype t, float x) {
  return t == dtype::fp16 ? kernels::fp16_from_float(x) : kernels::bf16_from_float(x);
}
float from_bits(dtype t, std::uint16_t h) {
  return t == dtype::fp16 ? kernels::float_from_fp16(h) : kernels::float_from_bf16(h);
}

// `count` elements of `type` holding value(rank, first + i, salt).
std::vector<std::byte> encode(dtype type, std::size_t rank, std::size_t first, std::size_t count, std::size_t salt) {
  std::vector<std::byte> out(count * kernels::dtype_size(type));
  for (std::size_t i = 0; i < count; ++i) {
    const float v = value(rank, first + i, salt);
    if (type == dtype::fp32) {
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      const std::uint16_t h = to_bits(type, v);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

float element(dtype type, const std::byte* p, std::size_t i) {
  if (type == dtype::fp32) {
    float v = 0;
    std::memcpy(&v, p + i * 4, 4);
    return v;
  }
  std::uint16_t h = 0;
  std::memcpy(&h, p + i * 2, 2);
  return from_bits(type, h);
}

// The reduction over `size` ranks of elements [first, first + count) of every rank's encode(...):
// in fp32, in the pairwise tree over the ranks written out by its definition (level by level,
// adjacent pairs added, an odd one out carried up: ((r0 + r1) + r2) for 3), rounded once (the
// contract of the mpi backend).
std::vector<std::byte> reference_reduction(dtype type, reduce_op op, std::size_t size, std::size_t first,
                                           std::size_t count, std::size_t salt) {
  std::vector<std::vector<float>> level;
  for (std::size_t q = 0; q < size; ++q) {
    const std::vector<std::byte> block = encode(type, q, first, count, salt);
    std::vector<float>& values = level.emplace_back(count);
    for (std::size_t i = 0; i < count; ++i) values[i] = element(type, block.data(), i);
  }
  while (level.size() > 1) {
    std::vector<std::vector<float>> up;
    for (std::size_t q = 0; q < level.size(); q += 2) {
      std::vector<float>& pair = up.emplace_back(std::move(level[q]));
      if (q + 1 == level.size()) continue;
      for (std::size_t i = 0; i < count; ++i) pair[i] += level[q + 1][i];
    }
    level = std::move(up);
  }
  const std::vector<float>& sum = level.front();
  std::vector<std::byte> out(count * kernels::dtype_size(type));
  for (std::size_t i = 0; i < count; ++i) {
    const float v = op == reduce_op::mean ? sum[i] / static_cast<float>(size) : sum[i];
    if (type == dtype::fp32) {
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      const std::uint16_t h = to_bits(type, v);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

// Bytes each rank contributes in an all-gather: rank r's block of `bytes` is (r, i, salt) mixed.
std::vector<std::byte> block_of(std::size_t rank, std::size_t bytes, std::size_t salt) {
  std::vector<std::byte> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::byte>((rank * 29 + i * 3 + salt) % 251);
  return out;
}

class mpi_communicator_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = make_host_device(std::uint64_t{1} << 30);
    stream_ = dev_->create_stream();
  }
  void TearDown() override {
    stream_ = device_stream();
    dev_.reset();
  }
  [[nodiscard]] stream_view stream() const { return stream_.view(); }

  std::unique_ptr<device> dev_;
  device_stream stream_;
};

TEST_F(mpi_communicator_test, AllGatherMatchesReference) {
  const auto comm = make_communicator(*dev_, mpi_options());
  const std::size_t n = comm->size();
  const std::size_t r = comm->rank();
  for (const std::size_t elements : odd_sizes) {
    const std::size_t bytes = elements * 4;
    const std::vector<std::byte> mine = block_of(r, bytes, elements);
    std::vector<std::byte> out(n * bytes);
    comm->all_gather(mine.data(), out.data(), bytes, stream());
    // In place: this rank's block already in the output.
    std::vector<std::byte> in_place(n * bytes);
    std::memcpy(in_place.data() + r * bytes, mine.data(), bytes);
    comm->all_gather(in_place.data() + r * bytes, in_place.data(), bytes, stream());
    dev_->synchronize(stream());
    for (std::size_t q = 0; q < n; ++q) {
      const std::vector<std::byte> expect = block_of(q, bytes, elements);
      EXPECT_EQ(0, std::memcmp(out.data() + q * bytes, expect.data(), bytes)) << "block of rank " << q << ", " << bytes;
      EXPECT_EQ(0, std::memcmp(in_place.data() + q * bytes, expect.data(), bytes)) << "in place, rank " << q;
    }
  }
}

TEST_F(mpi_communicator_test, AllGatherCoalescedOfMixedSizes) {
  const auto comm = make_communicator(*dev_, mpi_options());
  const std::size_t n = comm->size();
  const std::size_t r = comm->rank();
  const std::size_t sizes[] = {3, 28, 0, 16388};
  std::vector<std::vector<std::byte>> sends;
  std::vector<std::vector<std::byte>> recvs;
  std::vector<gather_part> parts;
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    sends.push_back(block_of(r, sizes[k], k));
    recvs.emplace_back(n * sizes[k]);
  }
  // The last part in place.
  std::memcpy(recvs.back().data() + r * sizes[3], sends.back().data(), sizes[3]);
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    const void* send = k == 3 ? recvs[k].data() + r * sizes[k] : sends[k].data();
    parts.push_back({send, recvs[k].data(), sizes[k]});
  }
  comm->all_gather_coalesced(parts, stream());
  dev_->synchronize(stream());
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    for (std::size_t q = 0; q < n; ++q) {
      const std::vector<std::byte> expect = block_of(q, sizes[k], k);
      EXPECT_EQ(0, std::memcmp(recvs[k].data() + q * sizes[k], expect.data(), sizes[k]))
          << "part " << k << " rank " << q;
    }
  }
  // Counted as one all_gather of the parts' summed bytes.
  EXPECT_EQ(comm->stats().calls, 1U);
  EXPECT_EQ(comm->stats().of(collective::all_gather).total(), (n - 1) * (3 + 28 + 16388));
}

TEST_F(mpi_communicator_test, ReduceScatterMatchesRankOrderReference) {
  const auto comm = make_communicator(*dev_, mpi_options());
  const std::size_t n = comm->size();
  const std::size_t r = comm->rank();
  for (const dtype type : {dtype::fp32, dtype::fp16, dtype::bf16}) {
    for (const reduce_op op : {reduce_op::sum, reduce_op::mean}) {
      for (const std::size_t count : odd_sizes) {
        const std::size_t salt = count + static_cast<std::size_t>(type) * 5 + static_cast<std::size_t>(op);
        const std::size_t block = count * kernels::dtype_size(type);
        std::vector<std::byte> send = encode(type, r, 0, n * count, salt);
        std::vector<std::byte> out(block);
        comm->reduce_scatter(send.data(), out.data(), count, type, op, stream());
        std::vector<std::byte> in_place = send;
        comm->reduce_scatter(in_place.data(), in_place.data() + r * block, count, type, op, stream());
        dev_->synchronize(stream());
        const std::vector<std::byte> expect = reference_reduction(type, op, n, r * count, count, salt);
        EXPECT_EQ(0, std::memcmp(out.data(), expect.data(), block))
            << kernels::dtype_name(type) << " op " << static_cast<int>(op) << " count " << count;
        EXPECT_EQ(0, std::memcmp(in_place.data() + r * block, expect.data(), block)) << "in place";
      }
    }
  }
}

// A gradient bucket's reduce-scatters as one: parts of sizes that divide nothing, of every dtype,
// one of them in place, under sum and mean. Each part lands bit for bit as its own reduce_scatter
// leaves it, and the call counts as one reduce_scatter of the parts' summed block bytes.
TEST_F(mpi_communicator_test, ReduceScatterCoalescedMatchesPerPartReduceScatter) {
  struct part_spec {
    std::size_t count;
    dtype type;
  };
  const part_spec specs[] = {{1, dtype::fp32}, {7, dtype::fp16}, {4097, dtype::bf16}, {4097, dtype::fp32},
                             {7, dtype::bf16}, {1, dtype::fp16}, {0, dtype::fp32},    {4097, dtype::fp16}};
  constexpr std::size_t in_place_part = 3;
  for (const reduce_op op : {reduce_op::sum, reduce_op::mean}) {
    const auto per_part = make_communicator(*dev_, mpi_options());
    const auto coalesced = make_communicator(*dev_, mpi_options());
    const std::size_t n = coalesced->size();
    const std::size_t r = coalesced->rank();
    std::vector<std::vector<std::byte>> sends;
    std::vector<std::vector<std::byte>> expect;
    std::vector<std::vector<std::byte>> got;
    std::vector<reduce_part> parts;
    std::uint64_t block_bytes = 0;
    for (std::size_t k = 0; k < std::size(specs); ++k) {
      const std::size_t count = specs[k].count;
      const std::size_t block = count * kernels::dtype_size(specs[k].type);
      sends.push_back(encode(specs[k].type, r, 0, n * count, k * 7 + static_cast<std::size_t>(op)));
      expect.emplace_back(block);
      got.emplace_back(k == in_place_part ? 0 : block);
      block_bytes += block;
    }
    for (std::size_t k = 0; k < std::size(specs); ++k) {
      per_part->reduce_scatter(sends[k].data(), expect[k].data(), specs[k].count, specs[k].type, op, stream());
    }
    std::vector<std::byte> in_place = sends[in_place_part];
    const std::size_t in_place_block = expect[in_place_part].size();
    for (std::size_t k = 0; k < std::size(specs); ++k) {
      if (k == in_place_part) {
        parts.push_back({in_place.data(), in_place.data() + r * in_place_block, specs[k].count, specs[k].type});
      } else {
        parts.push_back({sends[k].data(), got[k].data(), specs[k].count, specs[k].type});
      }
    }
    coalesced->reduce_scatter_coalesced(parts, op, stream());
    dev_->synchronize(stream());
    for (std::size_t k = 0; k < std::size(specs); ++k) {
      const std::byte* out = k == in_place_part ? in_place.data() + r * in_place_block : got[k].data();
      EXPECT_EQ(0, std::memcmp(out, expect[k].data(), expect[k].size()))
          << "part " << k << " (" << kernels::dtype_name(specs[k].type) << ", " << specs[k].count << " elements) op "
          << static_cast<int>(op);
    }
    const comm_stats s = coalesced->stats();
    EXPECT_EQ(s.calls, 1U);
    EXPECT_EQ(s.of(collective::reduce_scatter).total(), (n - 1) * block_bytes);
    EXPECT_EQ(s.total_bytes(), s.of(collective::reduce_scatter).total());
    EXPECT_EQ(per_part->stats().calls, std::size(specs));
    EXPECT_EQ(per_part->stats().of(collective::reduce_scatter).total(), s.of(collective::reduce_scatter).total());
  }
}

// No parts is a collective of nothing (still one call on every rank); a bad part is refused at
// once naming the collective, before anything is queued.
TEST_F(mpi_communicator_test, ReduceScatterCoalescedOfNoPartsAndBadParts) {
  const auto comm = make_communicator(*dev_, mpi_options());
  comm->reduce_scatter_coalesced({}, reduce_op::sum, stream());
  dev_->synchronize(stream());
  EXPECT_EQ(comm->stats().calls, 1U);
  std::vector<float> out(4);
  const reduce_part bad[] = {{out.data(), out.data(), 1, dtype::fp32}, {nullptr, out.data(), 4, dtype::fp32}};
  try {
    comm->reduce_scatter_coalesced(bad, reduce_op::sum, stream());
    ADD_FAILURE() << "a null send buffer was accepted";
  } catch (const usage_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("reduce_scatter on mpi (world)"));
  }
  EXPECT_EQ(comm->stats().calls, 1U);
}

TEST_F(mpi_communicator_test, AllReduceMatchesRankOrderReference) {
  const auto comm = make_communicator(*dev_, mpi_options());
  const std::size_t n = comm->size();
  const std::size_t r = comm->rank();
  for (const dtype type : {dtype::fp32, dtype::fp16, dtype::bf16}) {
    for (const reduce_op op : {reduce_op::sum, reduce_op::mean}) {
      for (const std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{4097}}) {
        const std::size_t salt = count * 3 + static_cast<std::size_t>(type) + static_cast<std::size_t>(op) * 11;
        const std::size_t bytes = count * kernels::dtype_size(type);
        const std::vector<std::byte> send = encode(type, r, 0, count, salt);
        std::vector<std::byte> out(bytes);
        comm->all_reduce(send.data(), out.data(), count, type, op, stream());
        std::vector<std::byte> in_place = send;
        comm->all_reduce(in_place.data(), in_place.data(), count, type, op, stream());
        dev_->synchronize(stream());
        const std::vector<std::byte> expect = reference_reduction(type, op, n, 0, count, salt);
        EXPECT_EQ(0, std::memcmp(out.data(), expect.data(), bytes))
            << kernels::dtype_name(type) << " op " << static_cast<int>(op) << " count " << count;
        EXPECT_EQ(0, std::memcmp(in_place.data(), expect.data(), bytes)) << "in place";
      }
    }
  }
}

TEST_F(mpi_communicator_test, AllToAllMatchesReference) {
  const auto comm = make_communicator(*dev_, mpi_options());
  const std::size_t n = comm->size();
  const std::size_t r = comm->rank();
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{7}, std::size_t{4097}}) {
    // Block d of rank s is block_of(s * n + d).
    std::vector<std::byte> send(n * bytes);
    for (std::size_t d = 0; d < n; ++d) {
      const std::vector<std::byte> b = block_of(r * n + d, bytes, bytes);
      std::memcpy(send.data() + d * bytes, b.data(), bytes);
    }
    std::vector<std::byte> out(n * bytes);
    comm->all_to_all(send.data(), out.data(), bytes, stream());
    dev_->synchronize(stream());
    for (std::size_t s = 0; s < n; ++s) {
      const std::vector<std::byte> expect = block_of(s * n + r, bytes, bytes);
      EXPECT_EQ(0, std::memcmp(out.data() + s * bytes, expect.data(), bytes)) << "from rank " << s << ", " << bytes;
    }
  }
}

TEST_F(mpi_communicator_test, BroadcastFromEveryRoot) {
  const auto comm = make_communicator(*dev_, mpi_options());
  const std::size_t n = comm->size();
  for (std::size_t root = 0; root < n; ++root) {
    for (const std::size_t bytes : {std::size_t{1}, std::size_t{4097}}) {
      std::vector<std::byte> buffer = block_of(comm->rank() + 100, bytes, root);
      comm->broadcast(buffer.data(), bytes, root, stream());
      dev_->synchronize(stream());
      const std::vector<std::byte> expect = block_of(root + 100, bytes, root);
      EXPECT_EQ(0, std::memcmp(buffer.data(), expect.data(), bytes)) << "root " << root;
    }
  }
  EXPECT_THROW(comm->broadcast(nullptr, 0, n, stream()), usage_error);
}

TEST_F(mpi_communicator_test, PointToPointBetweenEveryPairReachesTheReceiverAlone) {
  const auto comm = make_communicator(*dev_, mpi_options(1));  // every rank its own "node"
  const std::size_t n = comm->size();
  const std::size_t r = comm->rank();
  std::uint64_t sent = 0;
  std::size_t salt = 0;
  for (const std::size_t bytes : odd_sizes) {
    for (std::size_t from = 0; from < n; ++from) {
      for (std::size_t to = 0; to < n; ++to) {
        ++salt;
        std::vector<std::byte> buffer = block_of(r, bytes, salt);
        comm->point_to_point(buffer.data(), bytes, from, to, stream());
        dev_->synchronize(stream());
        // The receiver holds the sender's block; every other rank (the sender too) keeps its own.
        const std::size_t owner = r == to ? from : r;
        EXPECT_EQ(buffer, block_of(owner, bytes, salt)) << bytes << " bytes from " << from << " to " << to;
        if (r == from && from != to) sent += bytes;
      }
    }
  }
  const comm_stats s = comm->stats();
  EXPECT_EQ(s.calls, std::size(odd_sizes) * n * n);
  EXPECT_EQ(s.of(collective::point_to_point).inter_node, sent) << "every rank is its own node here";
  EXPECT_EQ(s.of(collective::point_to_point).intra_node, 0U);
  EXPECT_EQ(s.total_bytes(), sent) << "nothing but the point-to-point messages";
  EXPECT_THROW(comm->point_to_point(nullptr, 0, 0, n, stream()), usage_error);
}

TEST_F(mpi_communicator_test, BarrierAndIndependentWorldsInAnyOrder) {
  const auto a = make_communicator(*dev_, mpi_options());
  const auto b = make_communicator(*dev_, mpi_options());
  a->barrier();
  const std::size_t n = a->size();
  const std::size_t r = a->rank();
  const device_stream other = dev_->create_stream();
  // Each world keeps its own order; between worlds, even ranks issue a first and odd ranks b first.
  std::vector<std::byte> out_a(n * 64);
  std::vector<std::byte> out_b(n * 64);
  const std::vector<std::byte> in_a = block_of(r, 64, 1);
  const std::vector<std::byte> in_b = block_of(r, 64, 2);
  if (r % 2 == 0) {
    a->all_gather(in_a.data(), out_a.data(), 64, stream());
    b->all_gather(in_b.data(), out_b.data(), 64, other.view());
  } else {
    b->all_gather(in_b.data(), out_b.data(), 64, other.view());
    a->all_gather(in_a.data(), out_a.data(), 64, stream());
  }
  dev_->synchronize();
  for (std::size_t q = 0; q < n; ++q) {
    EXPECT_EQ(0, std::memcmp(out_a.data() + q * 64, block_of(q, 64, 1).data(), 64));
    EXPECT_EQ(0, std::memcmp(out_b.data() + q * 64, block_of(q, 64, 2).data(), 64));
  }
  b->barrier();
  a->barrier();
}

// What rank `r` of `n` sends to rank `d` in each collective of the test below, by this test's own
// arithmetic from what each collective's algorithm must move (not by bytes_to()): an all-gather,
// reduce-scatter or all-to-all block of `payload` bytes to every other rank; an all-reduce of
// `count` fp32 elements sends d its chunk [count*d/n, count*(d+1)/n) in the reduce-scatter phase,
// then this rank's reduced chunk in the all-gather phase; a broadcast from `root` sends only from it.
std::uint64_t own_arithmetic(collective c, std::size_t n, std::size_t r, std::size_t d, std::uint64_t count,
                             std::size_t root) {
  if (d == r) return 0;
  const std::uint64_t payload = count * 4;
  const auto chunk = [&](std::uint64_t i) { return (count * (i + 1) / n - count * i / n) * 4; };
  switch (c) {
    case collective::all_gather:
    case collective::reduce_scatter:
    case collective::all_to_all: return payload;
    case collective::all_reduce: return chunk(d) + chunk(r);
    case collective::broadcast: return r == root ? payload : 0;
    default: return 0;
  }
}

// The counters are measured where each MPI_Isend is posted; they must equal the test's own sum of
// what each collective sends to each rank, split by the destination's node, and bytes_to() (the
// documented rule the nccl backend counts by) must agree with that sum.
TEST_F(mpi_communicator_test, ByteCountersMeasureWhatEachRankSendsSplitByNode) {
  for (const std::size_t rpn : {std::size_t{1}, std::size_t{0}}) {  // 1: every rank its own "node"
    const auto comm = make_communicator(*dev_, mpi_options(rpn));
    const std::size_t n = comm->size();
    const std::size_t r = comm->rank();
    const std::size_t node_size = rpn == 0 ? n : rpn;  // one machine: MPI's split finds one node
    const std::size_t count = 4097;
    const std::size_t root = n - 1;
    std::vector<float> big(n * count, 1.0F);
    std::vector<float> small(count, 1.0F);
    comm->all_gather(small.data(), big.data(), count * 4, stream());
    comm->reduce_scatter(big.data(), small.data(), count, dtype::fp32, reduce_op::sum, stream());
    std::vector<float> copy(n * count);
    comm->all_to_all(big.data(), copy.data(), count * 4, stream());
    comm->all_to_all(big.data(), copy.data(), count * 4, stream());
    comm->all_reduce(small.data(), small.data(), count, dtype::fp32, reduce_op::mean, stream());
    comm->broadcast(small.data(), count * 4, root, stream());
    dev_->synchronize(stream());
    const comm_stats s = comm->stats();
    EXPECT_EQ(s.calls, 6U);
    const auto expect = [&](collective c, std::size_t times) {
      traffic own;
      std::uint64_t by_rule = 0;
      for (std::size_t d = 0; d < n; ++d) {
        const std::uint64_t b = own_arithmetic(c, n, r, d, count, root) * times;
        (d / node_size == r / node_size ? own.intra_node : own.inter_node) += b;
        by_rule += bytes_to(c, n, r, d, count * 4, root, 4) * times;
      }
      EXPECT_EQ(s.of(c).intra_node, own.intra_node) << collective_name(c) << " ranks_per_node " << rpn;
      EXPECT_EQ(s.of(c).inter_node, own.inter_node) << collective_name(c) << " ranks_per_node " << rpn;
      EXPECT_EQ(by_rule, own.total()) << collective_name(c) << ": bytes_to() disagrees with what is sent";
    };
    expect(collective::all_gather, 1);
    expect(collective::reduce_scatter, 1);
    expect(collective::all_to_all, 2);
    expect(collective::all_reduce, 1);
    expect(collective::broadcast, 1);
    if (n > 1 && rpn == 1) {
      EXPECT_EQ(s.total().intra_node, 0U);
      EXPECT_GT(s.total().inter_node, 0U);
    }
    if (rpn == 0) {
      EXPECT_EQ(s.total().inter_node, 0U);
    }
  }
}

TEST_F(mpi_communicator_test, SubGroupsOfTwoNodesOfTwo) {
  const auto probe = make_communicator(*dev_, mpi_options());
  if (probe->size() != 4) {
    GTEST_SKIP() << "needs 4 ranks";
  }
  const auto world = make_communicator(*dev_, mpi_options(2, 2));
  const std::size_t r = world->rank();
  communicator& node = world->node_local();
  communicator& cross = world->cross_node();
  communicator& hpz = world->hpz();
  EXPECT_EQ(node.size(), 2U);
  EXPECT_EQ(node.rank(), r % 2);
  EXPECT_EQ(cross.size(), 2U);
  EXPECT_EQ(cross.rank(), r / 2);
  EXPECT_EQ(hpz.size(), 2U);
  EXPECT_EQ(hpz.rank(), r % 2);
  EXPECT_EQ(node.name(), "mpi (node-local)");
  EXPECT_EQ(cross.name(), "mpi (cross-node)");
  EXPECT_EQ(hpz.name(), "mpi (hpz)");
  // A sub-group lies within itself; the node-local group lies within the hpz group of the same
  // ranks, but not within the cross-node group.
  EXPECT_EQ(&node.node_local(), &node);
  EXPECT_EQ(&node.hpz(), &node);
  EXPECT_EQ(&cross.cross_node(), &cross);
  EXPECT_THROW((void)node.cross_node(), usage_error);
  EXPECT_THROW((void)cross.node_local(), usage_error);

  // Each group gathers the world ranks of its members, in group-rank order.
  const auto gather_world_ranks = [&](communicator& g) {
    const auto mine = static_cast<std::uint32_t>(r);
    std::vector<std::uint32_t> out(g.size());
    g.all_gather(&mine, out.data(), 4, stream());
    dev_->synchronize(stream());
    return out;
  };
  const std::uint32_t node_first = static_cast<std::uint32_t>(r / 2 * 2);
  EXPECT_EQ(gather_world_ranks(node), (std::vector<std::uint32_t>{node_first, node_first + 1}));
  EXPECT_EQ(gather_world_ranks(cross),
            (std::vector<std::uint32_t>{static_cast<std::uint32_t>(r % 2), static_cast<std::uint32_t>(r % 2 + 2)}));
  EXPECT_EQ(gather_world_ranks(hpz), (std::vector<std::uint32_t>{node_first, node_first + 1}));

  // Every group counts its own, by the destination's node: node-local and hpz traffic stays on the
  // node, cross-node traffic leaves it.
  EXPECT_EQ(node.stats().of(collective::all_gather).intra_node, 4U);
  EXPECT_EQ(node.stats().of(collective::all_gather).inter_node, 0U);
  EXPECT_EQ(cross.stats().of(collective::all_gather).inter_node, 4U);
  EXPECT_EQ(cross.stats().of(collective::all_gather).intra_node, 0U);
  EXPECT_EQ(hpz.stats().of(collective::all_gather).intra_node, 4U);
  EXPECT_EQ(world->stats().calls, 0U);
  EXPECT_EQ(total_stats(*world).total_bytes(), 12U);

  // A reduction in a sub-group, and an hpZ group as large as the world is the world itself.
  float x = static_cast<float>(r + 1);
  float y = 0.0F;
  cross.all_reduce(&x, &y, 1, dtype::fp32, reduce_op::sum, stream());
  dev_->synchronize(stream());
  EXPECT_EQ(y, static_cast<float>(r % 2 + 1 + r % 2 + 3));
  const auto whole = make_communicator(*dev_, mpi_options(2, 4));
  EXPECT_EQ(&whole->hpz(), whole.get());
  EXPECT_EQ(whole->cross_node().size(), 2U);
  const auto one_node = make_communicator(*dev_, mpi_options(4, 1));
  EXPECT_EQ(&one_node->node_local(), one_node.get());
  EXPECT_EQ(one_node->hpz().size(), 1U);
  EXPECT_EQ(one_node->cross_node().size(), 1U);
}

TEST_F(mpi_communicator_test, SizesThatDoNotFitTheWorldNameTheirKey) {
  const auto probe = make_communicator(*dev_, mpi_options());
  const std::size_t n = probe->size();
  const std::size_t misfit = n == 3 ? 2 : 3;  // divides no world of 2, 3 (2) or 4 ranks
  if (n == 1) {
    GTEST_SKIP() << "every size divides a world of 1 except 0";
  }
  try {
    (void)make_communicator(*dev_, mpi_options(misfit));
    ADD_FAILURE() << "ranks_per_node " << misfit << " accepted";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("zoe.ranks_per_node"));
    EXPECT_THAT(e.what(), HasSubstr(std::to_string(n)));
  }
  for (const std::size_t hpz : {misfit, std::size_t{0}}) {
    try {
      (void)make_communicator(*dev_, mpi_options(0, hpz));
      ADD_FAILURE() << "hpz " << hpz << " accepted";
    } catch (const config_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("zero_optimization.zero_hpz_partition_size"));
    }
  }
  try {
    comm_options o = mpi_options();
    o.backend = "carrier-pigeon";
    (void)make_communicator(*dev_, o);
    ADD_FAILURE() << "unknown backend accepted";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("zoe.comm.backend"));
  }
  // auto under mpirun with several ranks takes mpi.
  comm_options automatic = mpi_options();
  automatic.backend = "auto";
  EXPECT_EQ(make_communicator(*dev_, automatic)->name(), "mpi (world)");
  // The world still works after the refusals.
  probe->barrier();
}

TEST_F(mpi_communicator_test, UsageErrorsThrowAtOnce) {
  const auto comm = make_communicator(*dev_, mpi_options());
  std::vector<std::byte> buf(comm->size() * 8);
  EXPECT_THROW(comm->all_gather(nullptr, buf.data(), 8, stream()), usage_error);
  EXPECT_THROW(comm->reduce_scatter(buf.data(), buf.data(), 1, static_cast<dtype>(77), reduce_op::sum, stream()),
               usage_error);
  if (comm->size() > 1) {
    EXPECT_THROW(comm->all_to_all(buf.data(), buf.data(), 8, stream()), usage_error);
    EXPECT_THROW(comm->all_gather(buf.data() + 1, buf.data(), 8, stream()), usage_error);
  }
  // Nothing was issued, so the ranks still agree on the order.
  comm->barrier();
  EXPECT_EQ(comm->stats().calls, 0U);
}

// Last in the file: its notices stay queued in the process. Every rank throws past its
// communicator, which tells the others; no rank detected a dead peer, so each still runs
// MPI_Finalize at exit and mpirun's status (what CTest checks) is success.
TEST_F(mpi_communicator_test, EveryRankThrowingPastItsCommunicatorStillFinalizes) {
  const auto unwind = [&] {
    const auto comm = make_communicator(*dev_, mpi_options());
    comm->barrier();
    throw config_error("every rank refuses the same setting");
  };
  EXPECT_THROW(unwind(), config_error);
}

}  // namespace
}  // namespace zoe::engine
