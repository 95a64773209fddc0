// The gradient path's resources: the checks of its options against the layout, the buckets, staging
// buffers and scratch it allocates, the streams and the worker it starts, and their release.
#include "gradient_path_impl.hpp"

#include <algorithm>
#include <exception>
#include <string>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"

namespace zoe::engine {

gradient_path::impl::impl(tier_manager& t, communicator& c, device& d, allocators::pinned_host_resource& p, mover* mv,
                          gradient_path_options o)
    : tiers(t), comm(c), dev(d), movers(mv), options(o) {
  const model_layout& layout = tiers.layout();
  ZOE_EXPECTS(comm.size() == layout.ranks(), "gradient_path: the layout is for ", layout.ranks(),
              " ranks, the communicator has ", comm.size());
  ZOE_EXPECTS(!replicated() || options.quantized_scratch_bytes == 0,
              "gradient_path: a layout held whole by every rank (stage 0) is all-reduced, which qgZ does not "
              "quantize (zero_optimization.zero_quantized_gradients)");
  const std::size_t n = layout.parameters().size();
  sums.assign(n, 0.0);
  overflows.assign(n, 0);
  partials.resize(n);
  touched.assign(n, 0);
  modules.resize(layout.modules().size());

  std::uint64_t largest_off_device = 0;
  std::uint64_t largest_module = 0;
  std::string largest_name;
  for (const module_layout& m : layout.modules()) {
    if (module_bytes(m.id) > largest_module) {
      largest_module = module_bytes(m.id);
      largest_name = m.name;
    }
  }
  for (const parameter_layout& prm : layout.parameters()) {
    const state_location& h = home(prm.id);
    if (prm.frozen || h.where == tier::device) continue;
    any_off_device = true;
    largest_off_device = std::max(largest_off_device, h.bytes);
    if (h.where == tier::nvme) {
      any_nvme = true;
      partials[prm.id].assign(chunks_of(prm.shard_numel), 0.0);
    }
  }
  ZOE_EXPECTS(options.bucket_count >= 1 && options.bucket_bytes >= largest_module,
              "gradient_path: ", options.bucket_count, " bucket(s) of ", options.bucket_bytes,
              " bytes cannot hold module '", largest_name, "' (", largest_module,
              " bytes of gradients); the plan sizes them from zero_optimization.reduce_bucket_size and overlap_comm");
  if (any_off_device) {
    ZOE_EXPECTS(options.staging_buffer_count >= 2 && options.staging_buffer_bytes > 0,
                "gradient_path: ", options.staging_buffer_count, " staging buffers of ", options.staging_buffer_bytes,
                " bytes, but gradients are off the device: a piece needs two (footprint_plan::gradient_buffer_*)");
    // A piece that does not cover a whole shard must cover whole chunks of the sum and of the store.
    if (options.staging_buffer_bytes < largest_off_device) {
      ZOE_EXPECTS(options.staging_buffer_bytes % gradient_sum_chunk_bytes == 0 &&
                      (!any_nvme || !has_store() || options.staging_buffer_bytes % movers->chunk_bytes() == 0),
                  "gradient_path: staging buffers of ", options.staging_buffer_bytes,
                  " bytes must hold whole 64 Ki-element fp32 chunks and whole aio.block_size chunks");
    }
  }
  ZOE_EXPECTS(!any_nvme || has_store(), "gradient_path: gradients are on nvme but no swap store was given");

  try {
    for (std::size_t b = 0; b < options.bucket_count; ++b) {
      bucket_memory.push_back(static_cast<std::byte*>(dev.allocate(options.bucket_bytes)));
    }
  } catch (const memory_error& e) {
    for (std::byte* m : bucket_memory) dev.deallocate(m, options.bucket_bytes);
    throw memory_error(
        str("gradient_path: ", options.bucket_count, " gradient bucket(s) of ", options.bucket_bytes,
            " bytes (zero_optimization.reduce_bucket_size, zero_optimization.overlap_comm): ", e.what()));
  } catch (...) {
    for (std::byte* m : bucket_memory) dev.deallocate(m, options.bucket_bytes);
    throw;
  }
  buckets.emplace(bucket_memory, options.bucket_bytes);
  counters.device_bucket_bytes = options.bucket_bytes * options.bucket_count;
  try {
    if (any_off_device) {
      staging.emplace(p, allocators::buffer_pool_options{.buffer_count = options.staging_buffer_count,
                                                         .buffer_size = options.staging_buffer_bytes,
                                                         .alignment = 4096,
                                                         .name = "gradient staging buffers"});
      counters.pinned_bytes = options.staging_buffer_count * options.staging_buffer_bytes;
    }
    if (dev.kind() == device_kind::cuda) {
      // Device homes' summaries stay on the device until the last micro-batch ends.
      slots.resize(n);
      for (const parameter_layout& prm : layout.parameters()) {
        if (prm.frozen || home(prm.id).where != tier::device) continue;
        // The workspace, then the result and the flag in the last 16 bytes (as the plan counts it).
        const std::uint64_t end = scratch_bytes + gradient_norm_scratch_bytes(prm.shard_numel);
        slots[prm.id].workspace = scratch_bytes;
        slots[prm.id].result = end - 16;
        slots[prm.id].flag = end - 8;
        scratch_bytes = end;
      }
      if (scratch_bytes > 0) scratch = static_cast<std::byte*>(dev.allocate(scratch_bytes));
    }
    if (options.quantized_scratch_bytes > 0) {
      std::size_t need = 0;
      const kernels::topology topo = qgz_topology(comm);
      for (const parameter_layout& prm : layout.parameters()) {
        need = std::max(need, quantized_reduce_scatter_scratch(topo, prm.shard_numel, dev.kind()));
      }
      ZOE_EXPECTS(options.quantized_scratch_bytes >= need, "gradient_path: the quantized reduce-scatter needs ", need,
                  " bytes of scratch for the largest parameter; the plan lent ", options.quantized_scratch_bytes,
                  " (zero_optimization.zero_quantized_gradients)");
      qgz_scratch = static_cast<std::byte*>(dev.allocate(options.quantized_scratch_bytes));
    }
    if (options.accumulate_locally) local.emplace(tiers, shards(), dev, staging ? &*staging : nullptr);
    stream = dev.create_stream();
    reduce_stream = dev.create_stream();
    worker = std::jthread([this] { run(); });
  } catch (...) {
    local.reset();
    staging.reset();
    if (qgz_scratch != nullptr) dev.deallocate(qgz_scratch, options.quantized_scratch_bytes);
    if (scratch != nullptr) dev.deallocate(scratch, scratch_bytes);
    for (std::byte* m : bucket_memory) dev.deallocate(m, options.bucket_bytes);
    throw;
  }
}

gradient_path::impl::~impl() {
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [this] { return pending == 0; });
    stopping = true;
  }
  changed.notify_all();
  if (worker.joinable()) worker.join();
  try {
    dev.synchronize(stream.view());
  } catch (const std::exception& e) {
    log::error("gradient_path: the path's stream failed while closing: ", e.what());
  }
  try {
    dev.synchronize(reduce_stream.view());
  } catch (const std::exception& e) {
    log::error("gradient_path: the reduction stream failed while closing: ", e.what());
  }
  stream = device_stream{};
  reduce_stream = device_stream{};
  local.reset();
  staging.reset();
  if (qgz_scratch != nullptr) {
    try {
      if (qgz_done.valid()) dev.synchronize(qgz_done);  // the last reduction has read its scratch
    } catch (const std::exception& e) {
      log::error("gradient_path: a quantized reduce-scatter failed while closing: ", e.what());
    }
    dev.deallocate(qgz_scratch, options.quantized_scratch_bytes);
  }
  if (scratch != nullptr) dev.deallocate(scratch, scratch_bytes);
  for (std::byte* m : bucket_memory) dev.deallocate(m, options.bucket_bytes);
}

}  // namespace zoe::engine
