#include "zoe/engine/config/batch_sizes.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {
namespace {

// a x b, or nullopt past 2^64 - 1 (a train_batch_size no document can write).
std::optional<std::uint64_t> times(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

}  // namespace

void resolve_batch_sizes(engine_config& config, std::size_t world_size) {
  ZOE_EXPECTS(world_size > 0, "resolve_batch_sizes: world size 0");
  const batch_config& written = config.batch;
  const std::uint64_t world = world_size;
  // Neither batch size: the steps as they are (as written, 1 by default, or as a program set them).
  if (!written.train_batch_size && !written.train_micro_batch_size_per_gpu) return;
  // DeepSpeed's branches in its order, each with integer division; the key derived is named in
  // the error below, since a rounded-down value is where most wrong triples come from.
  std::uint64_t batch = written.train_batch_size.value_or(0);
  std::uint64_t micro = written.train_micro_batch_size_per_gpu.value_or(0);
  std::uint64_t steps = written.gradient_accumulation_steps.value_or(0);
  std::string derived;
  if (written.train_batch_size && written.train_micro_batch_size_per_gpu && written.gradient_accumulation_steps) {
    // all three written: only checked
  } else if (written.train_batch_size && written.train_micro_batch_size_per_gpu) {
    steps = batch / micro / world;
    derived =
        str("gradient_accumulation_steps derived as train_batch_size / train_micro_batch_size_per_gpu / world "
            "size = ",
            batch, " / ", micro, " / ", world, " rounded down");
  } else if (written.train_batch_size && written.gradient_accumulation_steps) {
    micro = batch / world / steps;
    derived =
        str("train_micro_batch_size_per_gpu derived as train_batch_size / world size / "
            "gradient_accumulation_steps = ",
            batch, " / ", world, " / ", steps, " rounded down");
  } else if (written.train_batch_size) {
    steps = 1;
    micro = batch / world;
    derived =
        str("gradient_accumulation_steps taken as 1 and train_micro_batch_size_per_gpu derived as "
            "train_batch_size / world size = ",
            batch, " / ", world, " rounded down");
  } else {
    steps = written.gradient_accumulation_steps.value_or(1);
    const std::optional<std::uint64_t> b = times(micro, steps);
    const std::optional<std::uint64_t> total = b ? times(*b, world) : std::nullopt;
    ZOE_CHECK(total.has_value(), config_error, "train_micro_batch_size_per_gpu ", micro,
              " x gradient_accumulation_steps ", steps, " x world size ", world,
              " is past 2^64 - 1: write smaller batch sizes");
    batch = *total;
  }
  const std::string because = derived.empty() ? std::string() : str(" (", derived, ")");
  ZOE_CHECK(micro > 0 && steps > 0, config_error, "train_micro_batch_size_per_gpu ", micro,
            " and gradient_accumulation_steps ", steps, " must both be > 0", because,
            ": train_batch_size must be at least train_micro_batch_size_per_gpu x world size ", world);
  const std::optional<std::uint64_t> per_rank = times(micro, steps);
  const std::optional<std::uint64_t> product = per_rank ? times(*per_rank, world) : std::nullopt;
  ZOE_CHECK(product == batch, config_error, "train_batch_size ", batch, " is not train_micro_batch_size_per_gpu ",
            micro, " x gradient_accumulation_steps ", steps, " x world size ", world,
            product ? str(" = ", *product) : std::string(" (past 2^64 - 1)"), because,
            ": give batch sizes that multiply out (or leave one out for zoe to derive)");
  config.batch = batch_config{
      .train_batch_size = batch, .train_micro_batch_size_per_gpu = micro, .gradient_accumulation_steps = steps};
  config.gradient_accumulation_steps = steps;
}

}  // namespace zoe::engine
