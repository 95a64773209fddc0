// ZeRO++'s quantized collectives on whatever world this process is part of: world size 1 with the
// single communicator, or 2, 3 and 4 ranks under mpirun (label mpi), with every topology the world
// size allows. Every rank makes the same inputs for every rank from fixed seeds, so each checks its
// own result against the exact (double) reduction without further communication.
//
// The bounds are the quantizer's: a symmetric block of scale s = max |x| / levels codes each element
// within s / 2 (half a step), so
//   qwZ (int8, 127 levels): |out - x| <= s / 2 + rounding to the working type;
//   qgZ (int4, 7 levels):   |out - sum| <= sum over ranks of s_rank / 2
//                                         + (two-level worlds) sum over nodes of s_node / 2,
//   where s_node comes from the dequantized node sum, whose magnitude is at most the exact node sum's
//   plus its ranks' errors; then the mean's division and the rounding to the working type.
// Each case also checks that quantization lost something where it must (so it did run), and the
// bytes the communicator counted for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "usage_message.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {
namespace {

using kernels::dtype;
using zoe::testing::usage_message;

constexpr std::array<dtype, 3> all_types{dtype::fp32, dtype::fp16, dtype::bf16};
// Sizes that divide nothing, and one of several whole blocks at both blocks sizes.
constexpr std::array<std::size_t, 4> sizes{1, 7, 4097, 4 * qwz_default_block - 3};

// Device memory of `bytes` (host memory on the host device), freed on destruction.
class device_buffer {
 public:
  device_buffer(device& dev, std::size_t bytes) : dev_(&dev), bytes_(bytes), data_(dev.allocate(bytes)) {}
  ~device_buffer() { dev_->deallocate(data_, bytes_); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(data_); }
  [[nodiscard]] std::span<std::byte> span() const noexcept { return {data(), bytes_}; }

 private:
  device* dev_;
  std::size_t bytes_;
  void* data_;
};

// `x` rounded to `type`, as a float.
float round_to(float x, dtype type) {
  switch (type) {
    case dtype::fp16: return kernels::float_from_fp16(kernels::fp16_from_float(x));
    case dtype::bf16: return kernels::float_from_bf16(kernels::bf16_from_float(x));
    case dtype::fp32: break;
  }
  return x;
}

// The relative and absolute half-ulp of rounding to `type` (normal and subnormal range).
struct rounding {
  double relative;
  double absolute;
};
rounding rounding_of(dtype type) {
  switch (type) {
    case dtype::fp16: return {0x1p-11, 0x1p-25};
    case dtype::bf16: return {0x1p-8, 0x1p-134};
    case dtype::fp32: break;
  }
  return {0x1p-24, 0x1p-150};
}

// Writes `values` (exact in `type`) into `out` in `type`.
void store(std::span<const float> values, dtype type, std::byte* out) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == dtype::fp32) {
      std::memcpy(out + i * 4, &values[i], 4);
    } else {
      const std::uint16_t bits =
          type == dtype::fp16 ? kernels::fp16_from_float(values[i]) : kernels::bf16_from_float(values[i]);
      std::memcpy(out + i * 2, &bits, 2);
    }
  }
}

// `count` elements of `type` at `in`, as floats.
std::vector<float> load(const std::byte* in, std::size_t count, dtype type) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (type == dtype::fp32) {
      std::memcpy(&values[i], in + i * 4, 4);
    } else {
      std::uint16_t bits = 0;
      std::memcpy(&bits, in + i * 2, 2);
      values[i] = type == dtype::fp16 ? kernels::float_from_fp16(bits) : kernels::float_from_bf16(bits);
    }
  }
  return values;
}

// What rank `rank` contributes in case `seed`: normal values whose spread differs by rank and
// region (so blocks get different scales), exact in `type`.
std::vector<float> values_of(std::uint32_t seed, std::size_t rank, std::size_t count, dtype type) {
  std::mt19937 gen(seed * 1000003U + static_cast<std::uint32_t>(rank) * 7919U + static_cast<std::uint32_t>(type));
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    const float spread = (1.0F + static_cast<float>(rank)) * ((i / 1000) % 2 == 0 ? 1.0F : 0.01F);
    v[i] = round_to(normal(gen) * spread, type);
  }
  return v;
}

// Half a step of the symmetric block of `block` elements holding element i of `x`, per element.
std::vector<double> half_steps(std::span<const double> magnitude, std::size_t block, double levels) {
  std::vector<double> half(magnitude.size());
  for (std::size_t b = 0; b < magnitude.size(); b += block) {
    const std::size_t e = std::min(magnitude.size(), b + block);
    const double top = *std::max_element(magnitude.begin() + static_cast<std::ptrdiff_t>(b),
                                         magnitude.begin() + static_cast<std::ptrdiff_t>(e));
    // The kernels' float scale and codes are within a few float roundings of the exact ones.
    std::fill(half.begin() + static_cast<std::ptrdiff_t>(b), half.begin() + static_cast<std::ptrdiff_t>(e),
              top / levels / 2.0 * (1.0 + 1e-5));
  }
  return half;
}

std::vector<double> magnitudes(std::span<const float> x) {
  std::vector<double> m(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) m[i] = std::fabs(static_cast<double>(x[i]));
  return m;
}

// The bytes of one unit, from the layout the header documents: codes of whole blocks (a short run
// is one block of its length rounded to 8), one fp32 scale per block, padded to 16.
std::size_t expected_unit(std::size_t count, std::size_t block, std::size_t bits) {
  const std::size_t b = std::min(block, std::max<std::size_t>(8, (count + 7) / 8 * 8));
  const std::size_t blocks = (count + b - 1) / b;
  const std::size_t bytes = blocks * b * bits / 8 + blocks * 4;
  return (bytes + 15) / 16 * 16;
}

// The bytes a collective of `what` sent through the world and its sub-groups.
traffic sent_by(communicator& world, collective what) { return total_stats(world).of(what); }

// Every ranks_per_node the world allows (its divisors).
std::vector<std::size_t> topologies(std::size_t world) {
  std::vector<std::size_t> r;
  for (std::size_t d = 1; d <= world; ++d) {
    if (world % d == 0) r.push_back(d);
  }
  return r;
}

class quantized_collectives : public ::testing::Test {
 protected:
  std::unique_ptr<device> dev_ = make_host_device(256 * MiB);
  device_stream stream_ = dev_->create_stream();

  // A new world of every rank, `ranks_per_node` to a node (0: one node).
  std::unique_ptr<communicator> world(std::size_t ranks_per_node) {
    comm_options options;
    options.ranks_per_node = ranks_per_node;
    return make_communicator(*dev_, options);
  }

  std::size_t world_size() { return world(0)->size(); }
};

// ---- qwZ -------------------------------------------------------------------------------------------

struct gather_result {
  std::vector<float> got;   // every rank's segment, in rank order
  std::vector<float> sent;  // every rank's input, in rank order
};

gather_result run_gather(communicator& w, device& dev, stream_view stream, std::uint32_t seed, std::size_t count,
                         dtype type, bool in_place) {
  const std::size_t ranks = w.size();
  const std::size_t element = kernels::dtype_size(type);
  gather_result r;
  for (std::size_t k = 0; k < ranks; ++k) {
    const std::vector<float> v = values_of(seed, k, count, type);
    r.sent.insert(r.sent.end(), v.begin(), v.end());
  }
  const device_buffer full(dev, ranks * count * element);
  const device_buffer own(dev, count * element);
  std::byte* const send = in_place ? full.data() + w.rank() * count * element : own.data();
  store(std::span<const float>(r.sent).subspan(w.rank() * count, count), type, send);
  const device_buffer scratch(dev, quantized_all_gather_scratch(ranks, count));
  quantized_all_gather(w, dev, quantized_gather_part{send, full.data(), count, type}, scratch.span(), stream);
  dev.synchronize(stream);
  r.got = load(full.data(), ranks * count, type);
  return r;
}

TEST_F(quantized_collectives, AllGatherIsWithinHalfAStepOfEveryShardForEveryTypeAndSize) {
  const std::size_t ranks = world_size();
  for (const std::size_t per_node : {std::size_t{1}, ranks}) {
    const std::unique_ptr<communicator> w = world(per_node);
    for (const dtype type : all_types) {
      for (const std::size_t count : sizes) {
        SCOPED_TRACE(std::string(kernels::dtype_name(type)) + " x " + std::to_string(count) + ", " +
                     std::to_string(per_node) + " per node");
        const traffic before = sent_by(*w, collective::all_gather);
        const gather_result r = run_gather(*w, *dev_, stream_.view(), 11, count, type, false);
        const traffic after = sent_by(*w, collective::all_gather);

        const rounding round = rounding_of(type);
        std::size_t changed = 0;
        for (std::size_t k = 0; k < ranks; ++k) {
          const std::span<const float> x = std::span<const float>(r.sent).subspan(k * count, count);
          const std::vector<double> half = half_steps(magnitudes(x), qwz_default_block, 127.0);
          for (std::size_t i = 0; i < count; ++i) {
            const double got = r.got[k * count + i];
            const double bound =
                half[i] + (std::fabs(static_cast<double>(x[i])) + half[i]) * round.relative + round.absolute;
            ASSERT_LE(std::fabs(got - x[i]), bound) << "rank " << k << " element " << i << " sent " << x[i];
            changed += got != static_cast<double>(x[i]) ? 1U : 0U;
          }
        }
        // 127 levels cannot hold 7 or more normal values exactly (fp16 and bf16 ones neither).
        if (count >= 7) {
          EXPECT_GT(changed, 0U) << "nothing was lost: the shards were not quantized";
        }

        // One int8 message of codes and scales to every other rank, split by where they live.
        const std::size_t message = expected_unit(count, qwz_default_block, 8);
        const std::size_t counted[] = {count};
        EXPECT_EQ(quantized_all_gather_message_bytes(counted), message);
        EXPECT_EQ(after.intra_node - before.intra_node, (per_node - 1) * message);
        EXPECT_EQ(after.inter_node - before.inter_node, (ranks - per_node) * message);
      }
    }
  }
}

TEST_F(quantized_collectives, AllGatherSendsAQuarterOfFp32PlusScales) {
  // Whole blocks: the message is one byte per element and one fp32 scale per 2048.
  const std::size_t count = 4 * qwz_default_block;
  const std::size_t counted[] = {count};
  EXPECT_EQ(quantized_all_gather_message_bytes(counted), count + 4 * 4);
  EXPECT_LT(static_cast<double>(quantized_all_gather_message_bytes(counted)) / static_cast<double>(count * 4), 0.251);
  // A shard shorter than a block costs its own length rounded to 8, not a whole padded block.
  const std::size_t tiny[] = {7};
  EXPECT_EQ(quantized_all_gather_message_bytes(tiny), 16U);
  EXPECT_EQ(quantized_all_gather_scratch(3, 7), 48U);
}

TEST_F(quantized_collectives, AllGatherInPlaceGivesTheSameBitsOnEveryRank) {
  const std::unique_ptr<communicator> w = world(0);
  const gather_result apart = run_gather(*w, *dev_, stream_.view(), 12, 4097, dtype::bf16, false);
  const gather_result in_place = run_gather(*w, *dev_, stream_.view(), 12, 4097, dtype::bf16, true);
  // The own segment is the dequantized value too, so every rank holds the same parameter.
  EXPECT_EQ(apart.got, in_place.got);
}

TEST_F(quantized_collectives, CoalescedPartsTravelAsOneAllGatherAndMatchSeparateGathers) {
  const std::unique_ptr<communicator> w = world(0);
  const std::size_t ranks = w->size();
  struct part_case {
    std::size_t count;
    dtype type;
  };
  const std::array<part_case, 3> cases{{{7, dtype::fp16}, {4097, dtype::fp32}, {1, dtype::bf16}}};
  std::vector<std::unique_ptr<device_buffer>> own;
  std::vector<std::unique_ptr<device_buffer>> full;
  std::vector<quantized_gather_part> parts;
  std::vector<std::size_t> counts;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const part_case& c = cases[i];
    const std::size_t element = kernels::dtype_size(c.type);
    own.push_back(std::make_unique<device_buffer>(*dev_, c.count * element));
    full.push_back(std::make_unique<device_buffer>(*dev_, ranks * c.count * element));
    store(values_of(static_cast<std::uint32_t>(20 + i), w->rank(), c.count, c.type), c.type, own.back()->data());
    parts.push_back({own.back()->data(), full.back()->data(), c.count, c.type});
    counts.push_back(c.count);
  }
  const device_buffer scratch(*dev_, quantized_all_gather_scratch(ranks, counts));
  const comm_stats before = w->stats();
  quantized_all_gather(*w, *dev_, parts, scratch.span(), stream_.view());
  dev_->synchronize(stream_.view());
  const comm_stats after = w->stats();
  EXPECT_EQ(after.calls - before.calls, 1U);
  EXPECT_EQ(after.of(collective::all_gather).total() - before.of(collective::all_gather).total(),
            (ranks - 1) * quantized_all_gather_message_bytes(counts));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const gather_result alone =
        run_gather(*w, *dev_, stream_.view(), static_cast<std::uint32_t>(20 + i), cases[i].count, cases[i].type, false);
    EXPECT_EQ(load(full[i]->data(), ranks * cases[i].count, cases[i].type), alone.got) << "part " << i;
  }
}

TEST_F(quantized_collectives, AllGatherRefusesBadArgumentsNamingThem) {
  const std::unique_ptr<communicator> w = world(0);
  const device_buffer shard(*dev_, 4097 * 4);
  const device_buffer full(*dev_, w->size() * 4097 * 4);
  const std::size_t need = quantized_all_gather_scratch(w->size(), 4097);
  const device_buffer scratch(*dev_, need + 16);
  const quantized_gather_part part{shard.data(), full.data(), 4097, dtype::fp32};
  EXPECT_NE(usage_message([&] {
              quantized_all_gather(*w, *dev_, part, scratch.span().first(need - 1), stream_.view());
            }).find("scratch holds"),
            std::string::npos);
  EXPECT_NE(usage_message([&] {
              quantized_all_gather(*w, *dev_, part, scratch.span().subspan(4, need), stream_.view());
            }).find("aligned"),
            std::string::npos);
  EXPECT_NE(
      usage_message([&] { quantized_all_gather(*w, *dev_, part, scratch.span(), stream_.view(), 12); }).find("block"),
      std::string::npos);
  EXPECT_NE(usage_message([&] {
              quantized_all_gather(*w, *dev_, quantized_gather_part{nullptr, full.data(), 4097, dtype::fp32},
                                   scratch.span(), stream_.view());
            }).find("null send"),
            std::string::npos);
  dev_->synchronize(stream_.view());
}

// ---- qgZ -------------------------------------------------------------------------------------------

// Checks one qgZ reduce-scatter of `count` elements per rank on a world of `per_node` ranks per
// node against the exact reduction, the bound and the bytes.
void check_reduce_scatter(communicator& w, device& dev, stream_view stream, std::uint32_t seed, std::size_t count,
                          dtype type, reduce_op op, bool in_place) {
  const std::size_t ranks = w.size();
  const std::size_t rank = w.rank();
  const kernels::topology topo = qgz_topology(w);
  const std::size_t per_node = topo.ranks_per_node;
  const std::size_t nodes = topo.nodes;
  const std::size_t element = kernels::dtype_size(type);

  // Every rank's gradient; this rank's block is the one at its world rank.
  std::vector<std::vector<float>> grads;
  for (std::size_t k = 0; k < ranks; ++k) grads.push_back(values_of(seed, k, ranks * count, type));
  const device_buffer send(dev, ranks * count * element);
  const device_buffer own(dev, count * element);
  store(grads[rank], type, send.data());
  std::byte* const recv = in_place ? send.data() + rank * count * element : own.data();
  const device_buffer scratch(dev, quantized_reduce_scatter_scratch(topo, count, dev.kind()));

  const traffic before = sent_by(w, collective::all_to_all);
  quantized_reduce_scatter(w, dev, send.data(), recv, count, type, op, scratch.span(), stream);
  dev.synchronize(stream);
  const traffic after = sent_by(w, collective::all_to_all);
  const std::vector<float> got = load(recv, count, type);

  // The bound, per element of this rank's block.
  const std::size_t block = qgz_default_block;
  const auto block_of = [&](std::size_t k) { return std::span<const float>(grads[k]).subspan(rank * count, count); };
  std::vector<double> exact(count, 0.0);
  std::vector<double> bound(count, 0.0);
  std::vector<double> absolute_sum(count, 0.0);
  for (std::size_t n = 0; n < nodes; ++n) {
    std::vector<double> node_sum(count, 0.0);
    std::vector<double> node_error(count, 0.0);
    for (std::size_t j = 0; j < per_node; ++j) {
      const std::span<const float> x = block_of(n * per_node + j);
      const std::vector<double> half = half_steps(magnitudes(x), block, 7.0);
      for (std::size_t i = 0; i < count; ++i) {
        node_sum[i] += x[i];
        node_error[i] += half[i];
        absolute_sum[i] += std::fabs(static_cast<double>(x[i]));
      }
    }
    std::vector<double> node_total = node_error;
    if (per_node > 1 && nodes > 1) {  // the node's sum is requantized for the trip across nodes
      std::vector<double> top(count);
      for (std::size_t i = 0; i < count; ++i) top[i] = std::fabs(node_sum[i]) + node_error[i];
      const std::vector<double> half = half_steps(top, block, 7.0);
      for (std::size_t i = 0; i < count; ++i) node_total[i] += half[i];
    }
    for (std::size_t i = 0; i < count; ++i) {
      exact[i] += node_sum[i];
      bound[i] += node_total[i];
    }
  }
  const double post = op == reduce_op::mean ? 1.0 / static_cast<double>(ranks) : 1.0;
  const rounding round = rounding_of(type);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double want = exact[i] * post;
    // fp32 sums of a few terms, then the rounding to the working type.
    const double limit = (bound[i] + absolute_sum[i] * 1e-6) * post +
                         (std::fabs(want) + bound[i] * post) * round.relative + round.absolute;
    ASSERT_LE(std::fabs(got[i] - want), limit) << "element " << i << " of rank " << rank << "'s block";
    changed += static_cast<double>(got[i]) != static_cast<double>(round_to(static_cast<float>(want), type)) ? 1U : 0U;
  }
  // 15 levels cannot reproduce 7 or more normal values.
  if (count >= 7) {
    EXPECT_GT(changed, 0U) << "nothing was lost: the gradient was not quantized";
  }

  // Bytes: (R - 1) messages of N units inside the node, (N - 1) units across nodes.
  const std::size_t unit = expected_unit(count, block, 4);
  EXPECT_EQ(quantized_unit_bytes(count, qgz_config()), unit);
  EXPECT_EQ(after.intra_node - before.intra_node, (per_node - 1) * nodes * unit);
  EXPECT_EQ(after.inter_node - before.inter_node, (nodes - 1) * unit);
}

TEST_F(quantized_collectives, ReduceScatterIsWithinTheQuantizersBoundOnEveryTopologyTypeAndSize) {
  const std::size_t ranks = world_size();
  for (const std::size_t per_node : topologies(ranks)) {
    const std::unique_ptr<communicator> w = world(per_node);
    const kernels::topology topo = qgz_topology(*w);
    ASSERT_EQ(topo.ranks_per_node, per_node);
    ASSERT_EQ(topo.nodes, ranks / per_node);
    for (const dtype type : all_types) {
      for (const std::size_t count : sizes) {
        SCOPED_TRACE(std::string(kernels::dtype_name(type)) + " x " + std::to_string(count) + ", " +
                     std::to_string(topo.nodes) + " x " + std::to_string(per_node));
        check_reduce_scatter(*w, *dev_, stream_.view(), 31, count, type, reduce_op::mean, false);
      }
    }
  }
}

TEST_F(quantized_collectives, ReduceScatterInPlaceAndSum) {
  const std::size_t ranks = world_size();
  for (const std::size_t per_node : topologies(ranks)) {
    const std::unique_ptr<communicator> w = world(per_node);
    SCOPED_TRACE(std::to_string(per_node) + " per node");
    check_reduce_scatter(*w, *dev_, stream_.view(), 32, 4097, dtype::fp32, reduce_op::sum, true);
    check_reduce_scatter(*w, *dev_, stream_.view(), 33, 1000, dtype::bf16, reduce_op::mean, true);
  }
}

// The counted bytes against the plain collectives' on the same world: qwZ sends about a quarter of
// fp32, and qgZ's inter-node bytes are one int4 unit per other node instead of R fp32 blocks.
TEST_F(quantized_collectives, QuantizedBytesAgainstThePlainCollectives) {
  const std::size_t ranks = world_size();
  const std::size_t count = 4 * qwz_default_block;  // whole blocks at both block sizes
  for (const std::size_t per_node : topologies(ranks)) {
    const std::unique_ptr<communicator> w = world(per_node);
    const kernels::topology topo = qgz_topology(*w);
    SCOPED_TRACE(std::to_string(topo.nodes) + " x " + std::to_string(per_node));
    const device_buffer full(*dev_, ranks * count * 4);
    const device_buffer own(*dev_, count * 4);
    std::memset(full.data(), 0, ranks * count * 4);
    store(values_of(41, w->rank(), count, dtype::fp32), dtype::fp32, own.data());
    const device_buffer gather_scratch(*dev_, quantized_all_gather_scratch(ranks, count));
    const device_buffer reduce_scratch(*dev_, quantized_reduce_scatter_scratch(topo, count, dev_->kind()));

    const auto counted = [&](collective what, const auto& run) {
      const traffic before = sent_by(*w, what);
      run();
      dev_->synchronize(stream_.view());
      const traffic after = sent_by(*w, what);
      return traffic{after.intra_node - before.intra_node, after.inter_node - before.inter_node};
    };
    const traffic plain_gather =
        counted(collective::all_gather, [&] { w->all_gather(own.data(), full.data(), count * 4, stream_.view()); });
    const traffic qwz = counted(collective::all_gather, [&] {
      quantized_all_gather(*w, *dev_, quantized_gather_part{own.data(), full.data(), count, dtype::fp32},
                           gather_scratch.span(), stream_.view());
    });
    const traffic plain_reduce = counted(collective::reduce_scatter, [&] {
      w->reduce_scatter(full.data(), own.data(), count, dtype::fp32, reduce_op::mean, stream_.view());
    });
    const traffic qgz = counted(collective::all_to_all, [&] {
      quantized_reduce_scatter(*w, *dev_, full.data(), own.data(), count, dtype::fp32, reduce_op::mean,
                               reduce_scratch.span(), stream_.view());
    });
    // int8 codes and one fp32 scale per 2048: 4 / (1 + 4 / 2048) fewer bytes than fp32.
    EXPECT_EQ(qwz.total(), (ranks - 1) * (count + count / qwz_default_block * 4));
    EXPECT_EQ(plain_gather.total(), (ranks - 1) * count * 4);
    EXPECT_GE(static_cast<double>(plain_gather.total()), 3.99 * static_cast<double>(qwz.total()));
    // qgZ across nodes: (N - 1) int4 units (count / 2 bytes and a scale per 512) where the plain
    // reduce-scatter sends (N - 1) * R fp32 blocks: R * 4 / (1 / 2 + 4 / 512) fewer.
    EXPECT_EQ(qgz.inter_node, (topo.nodes - 1) * (count / 2 + count / qgz_default_block * 4));
    EXPECT_EQ(plain_reduce.inter_node, (topo.nodes - 1) * per_node * count * 4);
    if (topo.nodes > 1) {
      EXPECT_GE(static_cast<double>(plain_reduce.inter_node),
                7.8 * static_cast<double>(per_node) * static_cast<double>(qgz.inter_node));
    }
    if (w->rank() == 0) {
      std::printf(
          "bytes per rank, %zu x %zu, %zu fp32 elements per rank: all_gather %llu (intra %llu inter %llu) "
          "qwZ %llu (intra %llu inter %llu); reduce_scatter %llu (intra %llu inter %llu) qgZ %llu (intra %llu "
          "inter %llu)\n",
          topo.nodes, per_node, count, static_cast<unsigned long long>(plain_gather.total()),
          static_cast<unsigned long long>(plain_gather.intra_node),
          static_cast<unsigned long long>(plain_gather.inter_node), static_cast<unsigned long long>(qwz.total()),
          static_cast<unsigned long long>(qwz.intra_node), static_cast<unsigned long long>(qwz.inter_node),
          static_cast<unsigned long long>(plain_reduce.total()),
          static_cast<unsigned long long>(plain_reduce.intra_node),
          static_cast<unsigned long long>(plain_reduce.inter_node), static_cast<unsigned long long>(qgz.total()),
          static_cast<unsigned long long>(qgz.intra_node), static_cast<unsigned long long>(qgz.inter_node));
    }
  }
}

TEST_F(quantized_collectives, ReduceScatterRefusesBadArgumentsNamingThem) {
  const std::unique_ptr<communicator> w = world(0);
  const std::size_t count = 100;
  const device_buffer send(*dev_, w->size() * count * 4);
  const device_buffer recv(*dev_, count * 4);
  const std::size_t need = quantized_reduce_scatter_scratch(qgz_topology(*w), count, dev_->kind());
  const device_buffer scratch(*dev_, need + 16);
  const auto run = [&](const void* s, void* r, dtype type, reduce_op op, std::span<std::byte> sc, std::size_t block) {
    return usage_message(
        [&] { quantized_reduce_scatter(*w, *dev_, s, r, count, type, op, sc, stream_.view(), block); });
  };
  EXPECT_NE(
      run(send.data(), recv.data(), dtype::fp32, reduce_op::mean, scratch.span().first(need - 1), qgz_default_block)
          .find("scratch holds"),
      std::string::npos);
  EXPECT_NE(run(send.data(), recv.data(), dtype::fp32, reduce_op::mean, scratch.span(), 4).find("block"),
            std::string::npos);
  EXPECT_NE(
      run(nullptr, recv.data(), dtype::fp32, reduce_op::mean, scratch.span(), qgz_default_block).find("null send"),
      std::string::npos);
  EXPECT_NE(run(send.data(), recv.data(), static_cast<dtype>(7), reduce_op::mean, scratch.span(), qgz_default_block)
                .find("element type"),
            std::string::npos);
  EXPECT_NE(run(send.data(), recv.data(), dtype::fp32, static_cast<reduce_op>(9), scratch.span(), qgz_default_block)
                .find("reduce_op"),
            std::string::npos);
  dev_->synchronize(stream_.view());
}

}  // namespace
}  // namespace zoe::engine
