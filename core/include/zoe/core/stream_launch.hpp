#pragma once
// One call that launches a kernel in the order of a stream on whichever device it is: the host
// device runs the CPU version as a host task on the stream, a CUDA device gets the CUDA launch on
// the same stream. The caller writes the launch once, with both versions, instead of branching on
// device::kind() at every call site. core knows no kernel: the caller hands in both versions (for
// example kernels::X on the host and kernels::cuda::X on CUDA).

#include <functional>

#include "zoe/core/device.hpp"
#include "zoe/core/stream_view.hpp"

namespace zoe {

/// Launches one kernel in stream order on `dev`:
///   - host device: queues `host_task` on `stream` (device::launch_host). It runs later on the
///     stream's worker, after the work queued before it, so it must own (or outlive the stream's run
///     of) what it captures. A throw from it is reported by the next synchronize of the stream or the
///     device, as a device_error carrying its message.
///   - CUDA device: calls `cuda_launcher(stream)` now, on the calling thread, to enqueue the CUDA
///     kernel on that stream (stream.native() is the cudaStream_t; the kernels::cuda launchers take
///     the stream_view as it is). Whatever it throws propagates.
/// Returns once the work is queued; the version the device does not run is neither called nor
/// kept. Throws usage_error naming the device when the version it needs is empty, and what
/// launch_host throws (device_error). Thread-safe as far as the stream is.
void launch_kernel(device& dev, stream_view stream, std::function<void()> host_task,
                   const std::function<void(stream_view)>& cuda_launcher);

}  // namespace zoe
