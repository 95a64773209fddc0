#pragma once
// The device buckets backward writes module gradients into (gradient_path.hpp), and which modules
// are reduced together. Each bucket hands out its memory front to back and starts over once every
// module in it is done. A module goes to the bucket backward is filling while it fits, else to an
// empty one; with none, it waits.
//
// Reduction groups: a bucket backward moves on from (the next module does not fit, or the
// micro-batch ends) is sealed; once every module lent memory from it was reduced by backward, its
// modules are reduced over the ranks together, as one coalesced reduce-scatter (take_ready()).
// Sealed buckets are handed out in the order they were sealed, which is the order backward filled
// them, so every rank issues their collectives alike whichever thread reduced which module. With
// two buckets (overlap_comm) backward fills one while the other, sealed, is reduced.
//
// Not thread-safe: the gradient path holds its lock around every call.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace zoe::engine::detail {

class gradient_buckets {
 public:
  /// `memory[i]` is bucket i's device memory of `bytes` bytes each.
  gradient_buckets(std::vector<std::byte*> memory, std::uint64_t bytes);

  struct lease {
    std::size_t bucket = 0;
    std::byte* memory = nullptr;
  };
  /// `bytes` (at most bucket_bytes()) from the bucket being filled, or from an empty one, sealing
  /// the one being filled when the module does not fit in it; nullopt when none has room (wait for
  /// release()). Never throws beyond allocation.
  [[nodiscard]] std::optional<lease> try_take(std::uint64_t bytes);
  /// Seals the bucket being filled when anything was lent from it (the micro-batch ends).
  void seal();
  /// Backward is done with module `module` lent from bucket `index`: it is reduced with the bucket.
  void reduced(std::size_t index, std::size_t module);
  /// A module lent from bucket `index` is not reduced with it (stage 1 keeps it in its local
  /// accumulation until the last micro-batch): the bucket waits for it no more, but it stays lent
  /// until release().
  void set_aside(std::size_t index) noexcept;
  /// A module lent from bucket `index` will not be reduced (its reduce failed): the bucket waits for
  /// it no more, and it is done (release).
  void dropped(std::size_t index) noexcept;

  /// A sealed bucket whose modules were all reduced, to reduce over the ranks.
  struct batch {
    std::size_t bucket = 0;
    std::vector<std::size_t> modules;  ///< in the order backward reduced them; empty: nothing to reduce
  };
  /// The sealed buckets ready to reduce, oldest first, up to the first sealed one still waiting for
  /// a module; each is handed out once.
  [[nodiscard]] std::vector<batch> take_ready();
  /// Whether a sealed bucket waits to be handed out by take_ready().
  [[nodiscard]] bool sealed_pending() const noexcept { return !sealed_.empty(); }
  /// Whether take_ready() would hand out a bucket now.
  [[nodiscard]] bool ready_pending() const noexcept {
    return !sealed_.empty() && buckets_[sealed_.front()].unreduced == 0;
  }

  /// `modules` modules of bucket `index` are done: once none is left, the bucket is empty again.
  void release(std::size_t index, std::size_t modules = 1) noexcept;

  [[nodiscard]] std::uint64_t bucket_bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t count() const noexcept { return buckets_.size(); }
  [[nodiscard]] std::byte* memory(std::size_t index) const noexcept { return buckets_[index].memory; }

 private:
  struct entry {
    std::byte* memory = nullptr;
    std::uint64_t used = 0;            ///< bytes handed out since it was last empty
    std::size_t live = 0;              ///< modules in it not yet done
    std::size_t unreduced = 0;         ///< modules lent from it that backward has not reduced
    bool sealed = false;               ///< nothing more is lent from it until it is empty
    std::vector<std::size_t> reduced;  ///< modules reduced by backward, not yet handed out
  };
  std::vector<entry> buckets_;
  std::deque<std::size_t> sealed_;  ///< sealed buckets not yet handed out, in the order sealed
  std::uint64_t bytes_;
  std::size_t filling_ = 0;
};

}  // namespace zoe::engine::detail
