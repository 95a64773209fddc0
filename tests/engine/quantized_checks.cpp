#include "quantized_checks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>

#include "zoe/kernels/cast.hpp"

namespace zoe::engine::testing {
namespace {

using kernels::dtype;

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
  const device_allocation full(dev, ranks * count * element);
  const device_allocation own(dev, count * element);
  std::byte* const send = in_place ? full.data() + w.rank() * count * element : own.data();
  store(std::span<const float>(r.sent).subspan(w.rank() * count, count), type, send);
  const device_allocation scratch(dev, quantized_all_gather_scratch(ranks, count));
  quantized_all_gather(w, dev, quantized_gather_part{send, full.data(), count, type}, scratch.span(), stream);
  dev.synchronize(stream);
  r.got = load(full.data(), ranks * count, type);
  return r;
}

}  // namespace

std::vector<double> qwz_bounds(std::span<const float> x, dtype type) {
  const rounding round = rounding_of(type);
  std::vector<double> bound = half_steps(magnitudes(x), qwz_default_block, 127.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    bound[i] += (std::fabs(static_cast<double>(x[i])) + bound[i]) * round.relative + round.absolute;
  }
  return bound;
}

std::vector<std::size_t> topologies(std::size_t ranks) {
  std::vector<std::size_t> r;
  for (std::size_t d = 1; d <= ranks; ++d) {
    if (ranks % d == 0) r.push_back(d);
  }
  return r;
}

void check_gather(communicator& w, device& dev, stream_view stream, std::uint32_t seed, std::size_t count, dtype type) {
  const std::size_t ranks = w.size();
  const std::size_t per_node = w.node_local().size();
  const traffic before = sent_by(w, collective::all_gather);
  const gather_result r = run_gather(w, dev, stream, seed, count, type, false);
  const traffic after = sent_by(w, collective::all_gather);

  std::size_t changed = 0;
  for (std::size_t k = 0; k < ranks; ++k) {
    const std::span<const float> x = std::span<const float>(r.sent).subspan(k * count, count);
    const std::vector<double> bound = qwz_bounds(x, type);
    for (std::size_t i = 0; i < count; ++i) {
      const double got = r.got[k * count + i];
      ASSERT_LE(std::fabs(got - x[i]), bound[i]) << "rank " << k << " element " << i << " sent " << x[i];
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

void check_gather_in_place(communicator& w, device& dev, stream_view stream) {
  const gather_result apart = run_gather(w, dev, stream, 12, 4097, dtype::bf16, false);
  const gather_result in_place = run_gather(w, dev, stream, 12, 4097, dtype::bf16, true);
  // The own segment is the dequantized value too, so every rank holds the same parameter.
  EXPECT_EQ(apart.got, in_place.got);
}

void check_gather_coalesced(communicator& w, device& dev, stream_view stream) {
  const std::size_t ranks = w.size();
  struct part_case {
    std::size_t count;
    dtype type;
  };
  const std::array<part_case, 3> cases{{{7, dtype::fp16}, {4097, dtype::fp32}, {1, dtype::bf16}}};
  std::vector<std::unique_ptr<device_allocation>> own;
  std::vector<std::unique_ptr<device_allocation>> full;
  std::vector<quantized_gather_part> parts;
  std::vector<std::size_t> counts;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const part_case& c = cases[i];
    const std::size_t element = kernels::dtype_size(c.type);
    own.push_back(std::make_unique<device_allocation>(dev, c.count * element));
    full.push_back(std::make_unique<device_allocation>(dev, ranks * c.count * element));
    store(values_of(static_cast<std::uint32_t>(20 + i), w.rank(), c.count, c.type), c.type, own.back()->data());
    parts.push_back({own.back()->data(), full.back()->data(), c.count, c.type});
    counts.push_back(c.count);
  }
  const device_allocation scratch(dev, quantized_all_gather_scratch(ranks, counts));
  const comm_stats before = w.stats();
  quantized_all_gather(w, dev, parts, scratch.span(), stream);
  dev.synchronize(stream);
  const comm_stats after = w.stats();
  EXPECT_EQ(after.calls - before.calls, 1U);
  EXPECT_EQ(after.of(collective::all_gather).total() - before.of(collective::all_gather).total(),
            (ranks - 1) * quantized_all_gather_message_bytes(counts));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const gather_result alone =
        run_gather(w, dev, stream, static_cast<std::uint32_t>(20 + i), cases[i].count, cases[i].type, false);
    EXPECT_EQ(load(full[i]->data(), ranks * cases[i].count, cases[i].type), alone.got) << "part " << i;
  }
}

qgz_expectation qgz_expected(std::span<const std::span<const float>> blocks, std::size_t per_node, dtype type,
                             reduce_op op) {
  const std::size_t ranks = blocks.size();
  const std::size_t nodes = ranks / per_node;
  const std::size_t count = ranks == 0 ? 0 : blocks[0].size();
  const std::size_t block = qgz_default_block;
  std::vector<double> exact(count, 0.0);
  std::vector<double> bound(count, 0.0);
  std::vector<double> absolute_sum(count, 0.0);
  for (std::size_t n = 0; n < nodes; ++n) {
    std::vector<double> node_sum(count, 0.0);
    std::vector<double> node_error(count, 0.0);
    for (std::size_t j = 0; j < per_node; ++j) {
      const std::span<const float> x = blocks[n * per_node + j];
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
  qgz_expectation out{.want = std::vector<double>(count), .limit = std::vector<double>(count)};
  for (std::size_t i = 0; i < count; ++i) {
    out.want[i] = exact[i] * post;
    // fp32 sums of a few terms, then the rounding to the working type.
    out.limit[i] = (bound[i] + absolute_sum[i] * 1e-6) * post +
                   (std::fabs(out.want[i]) + bound[i] * post) * round.relative + round.absolute;
  }
  return out;
}

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
  const device_allocation send(dev, ranks * count * element);
  const device_allocation own(dev, count * element);
  store(grads[rank], type, send.data());
  std::byte* const recv = in_place ? send.data() + rank * count * element : own.data();
  const device_allocation scratch(dev, quantized_reduce_scatter_scratch(topo, count, dev.kind()));

  const traffic before = sent_by(w, collective::all_to_all);
  quantized_reduce_scatter(w, dev, send.data(), recv, count, type, op, scratch.span(), stream);
  dev.synchronize(stream);
  const traffic after = sent_by(w, collective::all_to_all);
  const std::vector<float> got = load(recv, count, type);

  // The bound, per element of this rank's block.
  const std::size_t block = qgz_default_block;
  std::vector<std::span<const float>> blocks;
  for (std::size_t k = 0; k < ranks; ++k)
    blocks.push_back(std::span<const float>(grads[k]).subspan(rank * count, count));
  const qgz_expectation expected = qgz_expected(blocks, per_node, type, op);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double want = expected.want[i];
    ASSERT_LE(std::fabs(got[i] - want), expected.limit[i]) << "element " << i << " of rank " << rank << "'s block";
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

void check_bytes_against_plain(communicator& w, device& dev, stream_view stream) {
  const std::size_t ranks = w.size();
  const std::size_t count = 4 * qwz_default_block;  // whole blocks at both block sizes
  {
    const kernels::topology topo = qgz_topology(w);
    const std::size_t per_node = topo.ranks_per_node;
    const device_allocation full(dev, ranks * count * 4);
    const device_allocation own(dev, count * 4);
    std::memset(full.data(), 0, ranks * count * 4);
    store(values_of(41, w.rank(), count, dtype::fp32), dtype::fp32, own.data());
    const device_allocation gather_scratch(dev, quantized_all_gather_scratch(ranks, count));
    const device_allocation reduce_scratch(dev, quantized_reduce_scatter_scratch(topo, count, dev.kind()));

    const auto counted = [&](collective what, const auto& run) {
      const traffic before = sent_by(w, what);
      run();
      dev.synchronize(stream);
      const traffic after = sent_by(w, what);
      return traffic{after.intra_node - before.intra_node, after.inter_node - before.inter_node};
    };
    const traffic plain_gather =
        counted(collective::all_gather, [&] { w.all_gather(own.data(), full.data(), count * 4, stream); });
    const traffic qwz = counted(collective::all_gather, [&] {
      quantized_all_gather(w, dev, quantized_gather_part{own.data(), full.data(), count, dtype::fp32},
                           gather_scratch.span(), stream);
    });
    const traffic plain_reduce = counted(collective::reduce_scatter, [&] {
      w.reduce_scatter(full.data(), own.data(), count, dtype::fp32, reduce_op::mean, stream);
    });
    const traffic qgz = counted(collective::all_to_all, [&] {
      quantized_reduce_scatter(w, dev, full.data(), own.data(), count, dtype::fp32, reduce_op::mean,
                               reduce_scratch.span(), stream);
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
    if (w.rank() == 0) {
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

}  // namespace zoe::engine::testing
