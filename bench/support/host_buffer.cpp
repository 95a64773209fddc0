#include "host_buffer.hpp"

#include <memory>

#include "zoe/core/device.hpp"
#include "zoe/core/units.hpp"

namespace zoe::bench {
namespace {

// One resource for every benchmark buffer of the process. The host device only locks memory for
// it (register_host); nothing is allocated from its budget, so the budget is nominal.
allocators::pinned_host_resource& benchmark_memory() {
  static const std::unique_ptr<device> host = make_host_device(GiB);
  static allocators::pinned_host_resource resource(*host);
  return resource;
}

}  // namespace

host_buffer::host_buffer(std::size_t bytes) : buffer_(benchmark_memory().allocate(bytes)) {}

}  // namespace zoe::bench
