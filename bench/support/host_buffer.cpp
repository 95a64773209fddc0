#include "host_buffer.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe::bench {

host_buffer::host_buffer(std::size_t bytes) : bytes_(bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  mapped_ = align_up(std::max<std::size_t>(bytes, 1), page);
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw memory_error(str("cannot map ", format_bytes(mapped_), " of benchmark buffers: ", errno_text(errno)));
  data_ = static_cast<std::byte*>(p);
  // Huge pages, as allocators' pinned_host_resource asks for: a 1 MiB O_DIRECT request from 4 KiB
  // pages needs 256 segments, more than this virtio drive's 254, so the kernel splits it in two;
  // from a huge page it is one segment. Measured here: 1.3-1.5 GiB/s reads without, 1.9-2.1 with.
  ::madvise(data_, mapped_, MADV_HUGEPAGE);
  locked_ = ::mlock(data_, mapped_) == 0;
  if (!locked_) {
    rlimit lim{};
    ::getrlimit(RLIMIT_MEMLOCK, &lim);
    log::warn_once("bench.mlock", str("cannot lock ", format_bytes(mapped_), " of benchmark buffers (RLIMIT_MEMLOCK is ",
                                      format_bytes(lim.rlim_cur), "); timing with unlocked memory"));
  }
  std::memset(data_, 0, mapped_);
}

host_buffer::~host_buffer() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
}

}  // namespace zoe::bench
