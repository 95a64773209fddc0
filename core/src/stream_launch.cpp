#include "zoe/core/stream_launch.hpp"

#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe {

void launch_kernel(device& dev, stream_view stream, std::function<void()> host_task,
                   const std::function<void(stream_view)>& cuda_launcher) {
  switch (dev.kind()) {
    case device_kind::host:
      ZOE_EXPECTS(static_cast<bool>(host_task), "launch_kernel on ", dev.name(),
                  ": the host device runs the host task, and none was given");
      dev.launch_host(stream, std::move(host_task));
      return;
    case device_kind::cuda:
      ZOE_EXPECTS(static_cast<bool>(cuda_launcher), "launch_kernel on ", dev.name(),
                  ": a CUDA device runs the CUDA launcher, and none was given");
      cuda_launcher(stream);
      return;
  }
  throw internal_error(str("launch_kernel on ", dev.name(), ": unknown device kind ", static_cast<int>(dev.kind())));
}

}  // namespace zoe
