// The mpi group's collectives as direct exchanges: each rank sends every other rank exactly the
// part that rank needs (bytes_to() describes what each rank hands MPI; the counters measure it, in
// mpi_exchange) and reduces in the pairwise tree over the ranks (tree_order_reduce.hpp).
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "mpi_group.hpp"
#include "mpi_runtime.hpp"
#include "tree_order_reduce.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

// The exchange of exchange_blocks() on host memory: `bytes` of `in` (block p of it for peer p when
// block_per_peer) to every peer, block p of `out` from peer p, this rank's own block copied.
void swap_blocks(mpi_exchange& x, std::size_t n, std::size_t r, const std::byte* in, std::byte* out,
                 std::uint64_t bytes, bool block_per_peer) {
  const auto block_for = [&](std::size_t p) { return block_per_peer ? in + p * bytes : in; };
  for (std::size_t p = 0; p < n; ++p) {
    if (p == r) continue;
    x.send(p, block_for(p), bytes);
    x.receive(p, out + p * bytes, bytes);
  }
  if (block_for(r) != out + r * bytes && bytes > 0) std::memcpy(out + r * bytes, block_for(r), bytes);
  x.run();
}

}  // namespace

void mpi_group::all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) {
  exchange_blocks(collective::all_gather, send, recv, bytes, false, stream);
}

void mpi_group::all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) {
  exchange_blocks(collective::all_to_all, send, recv, bytes, true, stream);
}

void mpi_group::exchange_blocks(collective what, const void* send, void* recv, std::size_t bytes, bool block_per_peer,
                                stream_view stream) {
  const collective_call c = call(what);
  const std::size_t n = size();
  const std::size_t r = rank();
  const std::uint64_t total =
      block_per_peer ? check_all_to_all(c, send, recv, bytes, n) : check_all_gather(c, {send, recv, bytes}, n, r);
  const std::uint64_t send_bytes = block_per_peer ? total : bytes;
  traffic_.count_call();
  launch(what, stream, send, send_bytes, recv, total,
         [n, r, bytes, block_per_peer](mpi_exchange& x, const std::byte* in, std::byte* out) {
           swap_blocks(x, n, r, in, out, bytes, block_per_peer);
         });
}

void mpi_group::all_gather_coalesced(std::span<const gather_part> parts, stream_view stream) {
  const collective_call c = call(collective::all_gather);
  const std::size_t n = size();
  const std::size_t r = rank();
  std::uint64_t packed = 0;
  for (const gather_part& part : parts) {
    check_all_gather(c, part, n, r);
    packed += part.bytes;
  }
  traffic_.count_call();
  // One message per peer: the parts packed into a staging buffer on the stream, exchanged, and the
  // gathered blocks copied to each part's recv. The staging buffer is [pack | n gathered packs].
  const std::vector<gather_part> kept(parts.begin(), parts.end());
  launch_staged(
      c, coalesced_tag_kind, stream, packed * (n + 1),
      [&](std::byte* pack) {
        std::uint64_t offset = 0;
        for (const gather_part& part : kept) {
          if (part.bytes > 0) dev_->copy_async(pack + offset, part.send, part.bytes, to_staging(), stream);
          offset += part.bytes;
        }
      },
      [n, r, packed](mpi_exchange& x, std::byte* pack) { swap_blocks(x, n, r, pack, pack + packed, packed, false); },
      [&](std::byte* pack) {
        const std::byte* const gathered = pack + packed;
        std::uint64_t offset = 0;
        for (const gather_part& part : kept) {
          for (std::size_t p = 0; p < n && part.bytes > 0; ++p) {
            void* dst = static_cast<std::byte*>(part.recv) + p * part.bytes;
            if (dst != part.send) {
              dev_->copy_async(dst, gathered + p * packed + offset, part.bytes, from_staging(), stream);
            }
          }
          offset += part.bytes;
        }
      });
}

void mpi_group::reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                               stream_view stream) {
  const collective_call c = call(collective::reduce_scatter);
  const std::size_t n = size();
  const std::size_t r = rank();
  const std::uint64_t block = check_reduce_scatter(c, {send, recv, count, type}, op, n, r);
  const std::uint64_t total = block * n;
  traffic_.count_call();
  launch(c.what, stream, send, total, recv, block,
         [n, r, block, count, type, op](mpi_exchange& x, const std::byte* in, std::byte* out) {
           std::vector<std::byte> arrived(block * n);
           for (std::size_t p = 0; p < n; ++p) {
             if (p == r) continue;
             x.send(p, in + p * block, block);
             x.receive(p, arrived.data() + p * block, block);
           }
           x.run();
           std::vector<const void*> blocks(n);
           for (std::size_t q = 0; q < n; ++q) blocks[q] = q == r ? in + r * block : arrived.data() + q * block;
           reduce_in_tree_order(blocks, out, count, type, op);
         });
}

void mpi_group::reduce_scatter_coalesced(std::span<const reduce_part> parts, reduce_op op, stream_view stream) {
  const collective_call c = call(collective::reduce_scatter);
  const std::size_t n = size();
  const std::size_t r = rank();
  std::vector<std::uint64_t> blocks;  // each part's block bytes
  blocks.reserve(parts.size());
  std::uint64_t packed = 0;  // every part's block for one rank
  for (const reduce_part& part : parts) {
    blocks.push_back(check_reduce_scatter(c, part, op, n, r));
    packed += blocks.back();
  }
  const std::uint64_t total = blocks_bytes(c, packed, n);
  traffic_.count_call();
  // One message per peer. The staging buffer is [n packs | n packs]: the parts' send buffers are
  // copied into the first half one after another (each its n blocks), regrouped on the worker into
  // the second half as one pack per destination (pack d: every part's block d, in part order), and
  // the first half then receives the peers' packs for this rank. Each part's blocks are reduced in
  // the pairwise tree by the function reduce_scatter uses, into this rank's own pack, and copied to recv.
  const std::vector<reduce_part> kept(parts.begin(), parts.end());
  launch_staged(
      c, coalesced_reduce_tag_kind, stream, 2 * total,
      [&](std::byte* data) {
        std::uint64_t offset = 0;
        for (std::size_t k = 0; k < kept.size(); ++k) {
          if (blocks[k] > 0) dev_->copy_async(data + offset, kept[k].send, blocks[k] * n, to_staging(), stream);
          offset += blocks[k] * n;
        }
      },
      [n, r, op, packed, total, kept, blocks](mpi_exchange& x, std::byte* data) {
        std::byte* const arrived = data;
        std::byte* const packs = data + total;
        std::uint64_t in = 0;
        std::uint64_t at = 0;  // the part's offset in a pack
        for (std::size_t k = 0; k < kept.size(); ++k) {
          for (std::size_t d = 0; d < n && blocks[k] > 0; ++d) {
            std::memcpy(packs + d * packed + at, arrived + in + d * blocks[k], blocks[k]);
          }
          in += blocks[k] * n;
          at += blocks[k];
        }
        for (std::size_t p = 0; p < n; ++p) {
          if (p == r) continue;
          x.send(p, packs + p * packed, packed);
          x.receive(p, arrived + p * packed, packed);
        }
        x.run();
        std::vector<const void*> from(n);
        at = 0;
        for (std::size_t k = 0; k < kept.size(); ++k) {
          for (std::size_t q = 0; q < n; ++q) from[q] = (q == r ? packs : arrived) + q * packed + at;
          reduce_in_tree_order(from, packs + r * packed + at, kept[k].count, kept[k].type, op);
          at += blocks[k];
        }
      },
      [&](std::byte* data) {
        const std::byte* const mine = data + total + r * packed;
        std::uint64_t at = 0;
        for (std::size_t k = 0; k < kept.size(); ++k) {
          if (blocks[k] > 0) dev_->copy_async(kept[k].recv, mine + at, blocks[k], from_staging(), stream);
          at += blocks[k];
        }
      });
}

void mpi_group::all_reduce(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                           stream_view stream) {
  const collective_call c = call(collective::all_reduce);
  const std::size_t n = size();
  const std::size_t r = rank();
  const std::uint64_t total = check_all_reduce(c, send, recv, count, type, op);
  const std::size_t element = kernels::dtype_size(type);
  traffic_.count_call();
  // A reduce-scatter of n chunks (chunk i to rank i) then an all-gather of the reduced chunks.
  launch(c.what, stream, send, total, recv, total,
         [n, r, count, element, type, op](mpi_exchange& x, const std::byte* in, std::byte* out) {
           const auto at = [&](std::size_t i) { return chunk_first(count, n, i) * element; };
           const auto bytes_of = [&](std::size_t i) { return at(i + 1) - at(i); };
           const std::size_t mine = bytes_of(r);
           std::vector<std::byte> arrived(mine * n);
           for (std::size_t p = 0; p < n; ++p) {
             if (p == r) continue;
             x.send(p, in + at(p), bytes_of(p));
             x.receive(p, arrived.data() + p * mine, mine);
           }
           x.run();
           std::vector<const void*> blocks(n);
           for (std::size_t q = 0; q < n; ++q) blocks[q] = q == r ? in + at(r) : arrived.data() + q * mine;
           reduce_in_tree_order(blocks, out + at(r), mine / element, type, op);
           // Every send of the first phase is done, so in place the other chunks may be overwritten.
           for (std::size_t p = 0; p < n; ++p) {
             if (p == r) continue;
             x.send(p, out + at(r), mine);
             x.receive(p, out + at(p), bytes_of(p));
           }
           x.run();
         });
}

void mpi_group::broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view stream) {
  const collective_call c = call(collective::broadcast);
  const std::size_t n = size();
  const std::size_t r = rank();
  ZOE_EXPECTS(root < n, describe(c), ": root ", root, " is not a rank of the group (size ", n, ")");
  check_buffer(c, "broadcast", buffer, bytes);
  traffic_.count_call();
  const bool is_root = r == root;
  launch(c.what, stream, is_root ? buffer : nullptr, is_root ? bytes : 0, is_root ? nullptr : buffer,
         is_root ? 0 : bytes, [n, r, root, bytes](mpi_exchange& x, const std::byte* in, std::byte* out) {
           if (r == root) {
             for (std::size_t p = 0; p < n; ++p) {
               if (p != r) x.send(p, in, bytes);
             }
           } else {
             x.receive(root, out, bytes);
           }
           x.run();
         });
}

void mpi_group::point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to, stream_view stream) {
  const collective_call c = call(collective::point_to_point);
  const std::size_t n = size();
  const std::size_t r = rank();
  ZOE_EXPECTS(from < n && to < n, describe(c), ": from ", from, " or to ", to, " is not a rank of the group (size ", n,
              ")");
  const bool sends = r == from && from != to;
  const bool receives = r == to && from != to;
  if (sends || receives) check_buffer(c, "buffer", buffer, bytes);
  traffic_.count_call();
  // Every rank queues it, the others with nothing to exchange: the tag sequence stays the same on
  // every rank, and a rank whose group failed refuses it in order like any other collective.
  launch(c.what, stream, sends ? buffer : nullptr, sends ? bytes : 0, receives ? buffer : nullptr, receives ? bytes : 0,
         [sends, receives, from, to, bytes](mpi_exchange& x, const std::byte* in, std::byte* out) {
           if (sends) x.send(to, in, bytes);
           if (receives) x.receive(from, out, bytes);
           x.run();
         });
}

void mpi_group::barrier() {
  // Host-side: a message of no bytes to and from every peer, under this group's next tag.
  const int tag = next_tag(barrier_tag_kind);
  {
    const std::lock_guard lock(mutex_);
    if (!failure_.empty()) {
      throw comm_error(str("barrier on ", name_, ": not run: an earlier collective of this group failed: ", failure_));
    }
  }
  mpi_exchange x(view_, tag, str("barrier on ", name_));
  for (std::size_t p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    x.send(p, nullptr, 0);
    x.receive(p, nullptr, 0);
  }
  x.run();
}

communicator& mpi_group::within(mpi_group* target, std::string_view which) {
  if (world_ == nullptr) return *target;  // the world hands out its sub-groups
  ZOE_EXPECTS(shape_.within(target->shape_), name_, ": ", which, "() of a sub-group that does not lie within the ",
              which, " group; ask the world communicator");
  return *this;
}

communicator& mpi_group::node_local() {
  mpi_group* world = world_ == nullptr ? this : world_;
  return within(world->node_local_ ? world->node_local_.get() : world, "node_local");
}

communicator& mpi_group::cross_node() {
  mpi_group* world = world_ == nullptr ? this : world_;
  return within(world->cross_node_ ? world->cross_node_.get() : world, "cross_node");
}

communicator& mpi_group::hpz() {
  mpi_group* world = world_ == nullptr ? this : world_;
  return within(world->hpz_ ? world->hpz_.get() : world, "hpz");
}

}  // namespace zoe::engine::detail
