// The accumulation into each gradient home: the device homes' kernel (on the caller's stream), and
// the worker thread, which takes the reduced buckets' jobs in order and adds them into device and
// host homes (nvme homes: gradient_nvme_accumulation.cpp).
#include "gradient_path_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/stream_launch.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::engine {
namespace {

using kernels::dtype;

}  // namespace

void gradient_path::impl::launch_device_home(parameter_id p, const std::byte* source, bool first, bool last,
                                             stream_view on) {
  const parameter_layout& prm = param(p);
  const std::size_t n = prm.shard_numel;
  auto* const target = static_cast<float*>(home(p).device);
  const kernels::const_tensor_view src{prm.dtype, source, n};
  const kernels::tensor_view dst{dtype::fp32, target, n};
  std::function<void()> host_task;
  std::function<void(stream_view)> cuda_launcher;
  if (dev.kind() == device_kind::host) {
    host_task = [this, p, src, dst, source, first, last] {
      if (source != nullptr) {
        if (first) {
          kernels::cast(src, dst);
        } else {
          kernels::accumulate(src, {static_cast<float*>(dst.data), dst.count});
        }
      } else if (first) {
        std::memset(dst.data, 0, dst.bytes());
      }
      if (last) {
        sums[p] = kernels::sum_of_squares(dst);
        overflows[p] = kernels::has_inf_nan(dst) ? 1 : 0;
      }
    };
  } else {
    cuda_launcher = [this, p, src, dst, source, first, last](stream_view s) {
      if (source != nullptr) {
        if (first) {
          kernels::cuda::cast(src, dst, s);
        } else {
          kernels::cuda::accumulate(src, {static_cast<float*>(dst.data), dst.count}, s);
        }
      } else if (first) {
        dev.memset_async(dst.data, 0, dst.bytes(), s);
      }
      if (last) {
        const device_summary_slot& slot = slots[p];
        auto* const flag = reinterpret_cast<std::uint32_t*>(scratch + slot.flag);
        dev.memset_async(flag, 0, sizeof(std::uint32_t), s);
        const std::size_t ws = kernels::cuda::sum_of_squares_workspace(dst.count);
        kernels::cuda::sum_of_squares(dst, reinterpret_cast<double*>(scratch + slot.result),
                                      std::span<std::byte>(scratch + slot.workspace, ws), s);
        kernels::cuda::has_inf_nan(dst, flag, s);
      }
    };
  }
  launch_kernel(dev, on, std::move(host_task), cuda_launcher);
}

// ---- worker side ---------------------------------------------------------------------------------

void gradient_path::impl::run() noexcept {
  for (;;) {
    job j;
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [this] { return stopping || !jobs.empty(); });
      if (jobs.empty()) return;
      j = std::move(jobs.front());
      jobs.pop_front();
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      process(j);
    } catch (...) {
      fail(carried_error::of(std::current_exception()));
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    {
      const std::lock_guard lock(mutex);
      if (j.bucket) buckets->release(*j.bucket, j.modules);
      counters.accumulate_seconds += took.count();
      --pending;
    }
    changed.notify_all();
  }
}

void gradient_path::impl::process(job& j) {
  if (j.ready.valid()) {
    try {
      dev.synchronize(j.ready);
    } catch (...) {
      // The device homes' kernels reduce() queued (their write moves begun there) may not have
      // run: their moves end failed, leaving them released and dirty, not in flight for good.
      for (std::size_t i = 0; i < j.params.size() && !j.sources.empty(); ++i) {
        if (home(j.params[i]).where != tier::device) continue;
        try {
          tiers.abort_move(j.params[i], state_kind::gradient);
        } catch (const std::exception& e) {
          log::error("gradient_path: cannot end the move of the gradient of '", param(j.params[i]).name,
                     "': ", e.what());
        }
      }
      throw;
    }
  }
  for (std::size_t i = 0; i < j.params.size(); ++i) {
    const parameter_id p = j.params[i];
    const std::byte* source = j.sources.empty() ? nullptr : j.sources[i];
    try {
      switch (home(p).where) {
        case tier::device: process_device(p, source, j.first, j.last); break;
        case tier::host: process_host(p, source, j.first, j.last); break;
        case tier::nvme: process_nvme(p, source, j.first, j.last); break;
      }
    } catch (...) {
      // One parameter failing does not stop the others: their moves must end, and the bucket drain.
      fail(carried_error::of(std::current_exception()));
      continue;
    }
    if (j.last && options.on_final) {
      try {
        // A device home's sum is on the device until summary() (CUDA); the host's and nvme's are here.
        const bool summed_here = home(p).where != tier::device;
        options.on_final(final_gradient{.param = p,
                                        .sum_of_squares = summed_here ? std::optional<double>(sums[p]) : std::nullopt,
                                        .overflow = summed_here && overflows[p] != 0});
      } catch (const std::exception& e) {
        log::error("gradient_path: telling that the gradient of '", param(p).name, "' is final failed: ", e.what());
      }
    }
  }
}

void gradient_path::impl::process_device(parameter_id p, const std::byte* source, bool first, bool last) {
  if (source != nullptr) {
    tiers.finish_move(p, state_kind::gradient);  // begun by reduce(); its kernel has run
    return;
  }
  // A parameter the micro-batch did not touch: zeroed in micro-batch 0, summed in the last.
  const bool write = first;
  if (write)
    ZOE_EXPECTS(tiers.begin_move(p, state_kind::gradient, move_kind::write), "gradient_path: the gradient of '",
                param(p).name, "' is in flight elsewhere");
  try {
    launch_device_home(p, nullptr, first, last, stream.view());
    dev.synchronize(stream.view());
  } catch (...) {
    if (write) tiers.abort_move(p, state_kind::gradient);
    throw;
  }
  if (write) tiers.finish_move(p, state_kind::gradient);
}

void gradient_path::impl::copy_to_host(parameter_id p, const std::byte* source, std::uint64_t first_element,
                                       std::uint64_t n, const allocators::buffer_lease& lease) {
  const std::size_t element = kernels::dtype_size(param(p).dtype);
  dev.copy_async(lease.data(), source + first_element * element, n * element, copy_kind::device_to_host, stream.view());
  dev.synchronize(stream.view());
  add_stat(&gradient_path_stats::bytes_to_host, n * element);
}

void gradient_path::impl::process_host(parameter_id p, const std::byte* source, bool first, bool last) {
  const parameter_layout& prm = param(p);
  const std::span<std::byte> bytes = home(p).host;
  auto* const target = reinterpret_cast<float*>(bytes.data());
  const std::uint64_t n = prm.shard_numel;
  const bool write = source != nullptr || first;
  if (write) {
    ZOE_EXPECTS(tiers.begin_move(p, state_kind::gradient, move_kind::write), "gradient_path: the gradient of '",
                prm.name, "' is in flight elsewhere");
  }
  try {
    if (source == nullptr && first) std::memset(target, 0, n * sizeof(float));
    if (source != nullptr) {
      const std::uint64_t piece = options.staging_buffer_bytes / sizeof(float);
      allocators::buffer_lease lease = staging->acquire();
      for (std::uint64_t e = 0; e < n; e += piece) {
        const std::uint64_t len = std::min(piece, n - e);
        copy_to_host(p, source, e, len, lease);
        const kernels::const_tensor_view src{prm.dtype, lease.data(), static_cast<std::size_t>(len)};
        if (first) {
          kernels::cast(src, kernels::tensor_view{dtype::fp32, target + e, static_cast<std::size_t>(len)});
        } else {
          kernels::accumulate(src, std::span<float>(target + e, static_cast<std::size_t>(len)));
        }
      }
    }
  } catch (...) {
    if (write) tiers.abort_move(p, state_kind::gradient);
    throw;
  }
  if (write) tiers.finish_move(p, state_kind::gradient);
  if (last) {
    const kernels::const_tensor_view all{dtype::fp32, target, static_cast<std::size_t>(n)};
    sums[p] = kernels::sum_of_squares(all);
    overflows[p] = kernels::has_inf_nan(all) ? 1 : 0;
  }
}

void gradient_path::impl::fail(carried_error e) {
  const std::lock_guard lock(mutex);
  if (!failure) failure = std::move(e);
}

void gradient_path::impl::add_stat(std::uint64_t gradient_path_stats::*field, std::uint64_t n) {
  const std::lock_guard lock(mutex);
  counters.*field += n;
}

}  // namespace zoe::engine
