#include "uring_backend.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <exception>
#include <fstream>

#include "fd_registry.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe::io::detail {
namespace {

constexpr std::size_t max_ring_entries = 32768;   // IORING_MAX_ENTRIES
constexpr std::size_t max_fixed_buffer = GiB;     // the kernel refuses larger single buffers
constexpr unsigned file_table_size = 64;          // files one engine works on at once
constexpr std::size_t max_fixed_buffers = 16384;  // IORING_MAX_REG_BUFFERS

// Most to least fitting for one issuer; each later set only if the kernel says EINVAL to the
// one before (older kernels do not know the flag). DEFER_TASKRUN runs completion work only when
// the issuer waits, so a busy issuer is never interrupted; COOP_TASKRUN at least avoids the IPI.
// SUBMIT_ALL keeps a batch going past one bad entry (its error still comes back in its CQE).
constexpr std::array<unsigned, 3> setup_choices = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL,
    IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL,
    0,
};

std::string io_uring_disabled_sysctl() {
  std::ifstream in("/proc/sys/kernel/io_uring_disabled");
  std::string value;
  if (!(in >> value)) return {};
  return value;
}

// EAGAIN / EBUSY / EINTR from a submit or wait leave the entries in the submission queue (or
// return early); the next call carries on, so they are no failures.
bool transient(int result) noexcept { return result == -EAGAIN || result == -EBUSY || result == -EINTR; }

std::string memlock_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return format_bytes(limit.rlim_cur);
}

// Names the calling thread for the life of the process. std::thread::id will not do: a joined
// thread's id is handed to the next thread, but the kernel's single issuer is the old one.
std::uint64_t this_thread_token() noexcept {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t token = next.fetch_add(1, std::memory_order_relaxed);
  return token;
}

}  // namespace

std::string setup_flag_names(unsigned flags) {
  std::string names;
  const auto add = [&](unsigned flag, std::string_view name) {
    if ((flags & flag) == 0) return;
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "|" + std::string.
    if (!names.empty()) names += '|';
    names += name;
  };
  add(IORING_SETUP_SINGLE_ISSUER, "SINGLE_ISSUER");
  add(IORING_SETUP_DEFER_TASKRUN, "DEFER_TASKRUN");
  add(IORING_SETUP_COOP_TASKRUN, "COOP_TASKRUN");
  add(IORING_SETUP_SUBMIT_ALL, "SUBMIT_ALL");
  return names.empty() ? "none" : names;
}

uring_backend::uring_backend(const engine_options& options)
    : async_backend(options, async_capacity(options, max_ring_entries, "io_uring ring")) {
  open_ring();
}

uring_backend::~uring_backend() {
  if (in_kernel() > 0 && (flags_ & IORING_SETUP_DEFER_TASKRUN) != 0 && this_thread_token() != owner_) {
    // Only the issuer may wait on a DEFER_TASKRUN ring (the kernel says EEXIST to others). What
    // the kernel has posted already can be taken without entering it.
    deliver_completions();
    if (in_kernel() > 0) {
      log::error("an io_uring engine was destroyed by a thread that is not its issuer while ", in_kernel(),
                 " operations were in flight: only the issuing thread can wait for them, and closing the ring "
                 "would let the kernel write into memory its caller frees next; stopping the process. Destroy "
                 "an engine on the thread that drives it, or once it is idle.");
      std::terminate();
    }
  }
  drain_before_close("uring");
  close_ring();
}

void uring_backend::open_ring() {
  int result = -EINVAL;
  for (const unsigned flags : setup_choices) {
    io_uring_params params{};
    params.flags = flags;
    result = io_uring_queue_init_params(static_cast<unsigned>(capacity()), &ring_, &params);
    if (result == 0) {
      flags_ = flags;
      break;
    }
    if (result != -EINVAL) break;
  }
  if (result != 0) {
    std::string why;
    if (result == -EPERM || result == -ENOSYS) {
      const std::string sysctl = io_uring_disabled_sysctl();
      why = sysctl.empty() || sysctl == "0"
                ? " (io_uring is blocked for this process, e.g. by a seccomp filter or container policy)"
                : str(" (io_uring is disabled by sysctl kernel.io_uring_disabled=", sysctl, ")");
    } else if (result == -ENOMEM) {
      why = str(" (locked-memory limit RLIMIT_MEMLOCK is ", memlock_limit(), ")");
    }
    throw io_error(str("cannot set up an io_uring ring of ", capacity(), " entries: ", errno_text(-result), why),
                   -result);
  }
  ring_open_ = true;
  owner_ = this_thread_token();
  log::debug("io_uring ring of ", capacity(), " entries, setup flags ", setup_flag_names(flags_));

  files_.clear();
  free_file_slots_.clear();
  closes_seen_ = file_closes_so_far();
  // A sparse table (kernel 5.19+) lets files be registered one by one as they show up.
  file_table_ = io_uring_register_files_sparse(&ring_, file_table_size) == 0;
  if (file_table_) {
    for (int s = static_cast<int>(file_table_size); s > 0; --s) free_file_slots_.push_back(s - 1);
  } else {
    log::debug("io_uring: no sparse file table on this kernel; using plain file descriptors");
  }
  register_regions();
  register_notify_fd();
}

void uring_backend::notify_on_result(int eventfd) {
  follow_driving_thread();  // a single-issuer ring takes registrations only from its issuer
  async_backend::notify_on_result(eventfd);
  register_notify_fd();
}

void uring_backend::register_notify_fd() {
  if (notify_fd() < 0) return;
  // With DEFER_TASKRUN the kernel signals it when a completion is queued for the issuer, before
  // the CQE is posted; the engine's poll then enters the kernel to post it (wait(0) below).
  ZOE_CHECK_NEG_ERRNO(io_uring_register_eventfd(&ring_, notify_fd()), "io_uring_register_eventfd failed");
}

void uring_backend::close_ring() noexcept {
  if (!ring_open_) return;
  io_uring_queue_exit(&ring_);
  ring_open_ = false;
}

void uring_backend::follow_driving_thread() {
  if ((flags_ & IORING_SETUP_SINGLE_ISSUER) == 0 || this_thread_token() == owner_) return;
  // A single-issuer ring refuses every other thread (EEXIST). An engine may be handed to another
  // thread while idle (made in one, driven in another), so then the ring moves with it: a new
  // ring for this thread, the same registered buffers, files registered again as used.
  ZOE_EXPECTS(unfinished() == 0, "an io_uring engine is driven by a second thread while ", unfinished(),
              " of its operations are in flight; hand an engine to another thread only when it is idle");
  close_ring();
  open_ring();
}

bool uring_backend::register_buffers(std::span<const std::span<std::byte>> regions) {
  follow_driving_thread();
  ZOE_EXPECTS(unfinished() == 0, "register_buffers with ", unfinished(), " operations in flight");
  if (!buffers_.empty()) {
    ZOE_CHECK_NEG_ERRNO(io_uring_unregister_buffers(&ring_), "io_uring_unregister_buffers failed");
    buffers_.clear();
  }
  regions_.assign(regions.begin(), regions.end());
  return register_regions();
}

bool uring_backend::register_regions() {
  std::vector<iovec> pieces;
  std::size_t bytes = 0;
  for (const std::span<std::byte> region : regions_) {
    for (std::size_t at = 0; at < region.size(); at += max_fixed_buffer) {
      const std::size_t n = std::min(max_fixed_buffer, region.size() - at);
      pieces.push_back({region.data() + at, n});
      bytes += n;
    }
  }
  if (pieces.empty()) return false;
  if (pieces.size() > max_fixed_buffers) {
    log::warn_once("uring_register_buffers",
                   str("io_uring: ", pieces.size(), " buffer pieces are more than the ", max_fixed_buffers,
                       " a ring can register; using unregistered reads and writes"));
    return false;
  }
  const int result = io_uring_register_buffers(&ring_, pieces.data(), static_cast<unsigned>(pieces.size()));
  if (result < 0) {
    log::warn_once(
        "uring_register_buffers",
        str("io_uring: registering ", format_bytes(bytes), " of I/O buffers failed: ", errno_text(-result),
            result == -ENOMEM ? str(" (pinned memory counts against RLIMIT_MEMLOCK, which is ", memlock_limit(), ")")
                              : std::string(result == -EFAULT || result == -EOPNOTSUPP
                                                ? " (only anonymous, shmem or hugetlb memory can be pinned)"
                                                : ""),
            "; using unregistered reads and writes"));
    return false;
  }
  buffers_.clear();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto begin = reinterpret_cast<std::uintptr_t>(pieces[i].iov_base);
    buffers_.push_back({begin, begin + pieces[i].iov_len, static_cast<int>(i)});
  }
  std::sort(buffers_.begin(), buffers_.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  log::debug("io_uring: registered ", format_bytes(bytes), " of I/O buffers in ", pieces.size(), " pieces");
  return true;
}

int uring_backend::buffer_index(const std::byte* buffer, std::size_t length) const {
  const auto begin = reinterpret_cast<std::uintptr_t>(buffer);
  auto it = std::upper_bound(buffers_.begin(), buffers_.end(), begin,
                             [](std::uintptr_t b, const registered_buffer& r) { return b < r.begin; });
  if (it == buffers_.begin()) return -1;
  --it;
  return begin + length <= it->end ? it->index : -1;
}

void uring_backend::forget_closed_files() {
  const std::uint64_t closes = file_closes_so_far();
  if (closes == closes_seen_) return;
  closes_seen_ = closes;
  // Some io::file closed: the ring's reference would keep that file open (an unlinked swap file
  // keeps its space) and, worse, its fd number may now name another file.
  std::erase_if(files_, [&](const registered_file& f) {
    if (open_file_identity(f.fd) == f.identity) return false;
    if (f.slot >= 0) {
      int none = -1;
      ZOE_CHECK_NEG_ERRNO(io_uring_register_files_update(&ring_, static_cast<unsigned>(f.slot), &none, 1),
                          "io_uring_register_files_update (removing a closed file) failed");
      free_file_slots_.push_back(f.slot);
    }
    return true;
  });
}

int uring_backend::file_slot(int fd) {
  for (const registered_file& f : files_) {
    if (f.fd == fd) return f.slot;
  }
  registered_file entry{fd, open_file_identity(fd), -1};
  // Only files that an io::file owns: for any other descriptor we would never learn of its close.
  if (file_table_ && entry.identity != 0 && !free_file_slots_.empty()) {
    const int slot = free_file_slots_.back();
    const int result = io_uring_register_files_update(&ring_, static_cast<unsigned>(slot), &fd, 1);
    if (result == 1) {
      free_file_slots_.pop_back();
      entry.slot = slot;
    } else {
      log::warn_once("uring_register_files", str("io_uring: registering a file failed (", errno_text(-result),
                                                 "); using plain file descriptors where that happens"));
    }
  }
  files_.push_back(entry);
  return entry.slot;
}

std::size_t uring_backend::start(std::span<const std::uint32_t> slots) {
  // Everything that may throw comes before the first entry is filled: start() throws only
  // having taken nothing (async_backend::start).
  forget_closed_files();
  ZOE_CHECK(io_uring_sq_space_left(&ring_) >= slots.size(), internal_error, "io_uring submission queue has room for ",
            io_uring_sq_space_left(&ring_), " of ", slots.size(), " entries with ", in_kernel(), " in flight of ",
            capacity());
  for (const std::uint32_t slot : slots) {
    const raw_op& op = op_in(slot);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    int fd = op.fd;
    unsigned sqe_flags = 0;
    if (const int file = file_slot(op.fd); file >= 0) {
      fd = file;
      sqe_flags |= IOSQE_FIXED_FILE;
      ++fixed_file_ops_;
    }
    const int buffer = buffer_index(op.buffer, op.length);
    const auto length = static_cast<unsigned>(op.length);  // at most block_size, checked by the engine
    if (op.op == io_op::read) {
      if (buffer >= 0) {
        io_uring_prep_read_fixed(sqe, fd, op.buffer, length, op.offset, buffer);
      } else {
        io_uring_prep_read(sqe, fd, op.buffer, length, op.offset);
      }
    } else {
      if (buffer >= 0) {
        io_uring_prep_write_fixed(sqe, fd, op.buffer, length, op.offset, buffer);
      } else {
        io_uring_prep_write(sqe, fd, op.buffer, length, op.offset);
      }
    }
    if (buffer >= 0) ++fixed_buffer_ops_;
    io_uring_sqe_set_flags(sqe, sqe_flags);
    io_uring_sqe_set_data64(sqe, slot);
  }
  // overlap_events: the same syscall also collects completions that are due, so the next reap
  // often finds them without entering the kernel again.
  // The entries are in the submission queue now, so they are taken whatever this call says: a
  // failure is reported by the next wait(), which enters the kernel with them again.
  static_cast<void>(overlap_events() ? io_uring_submit_and_get_events(&ring_) : io_uring_submit(&ring_));
  if (overlap_events()) deliver_completions();
  return slots.size();
}

std::size_t uring_backend::deliver_completions() {
  std::array<io_uring_cqe*, 64> cqes{};
  std::size_t total = 0;
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes.data(), cqes.size());
    for (unsigned i = 0; i < n; ++i) {
      complete(static_cast<std::uint32_t>(io_uring_cqe_get_data64(cqes[i])), cqes[i]->res);
    }
    io_uring_cq_advance(&ring_, n);
    total += n;
    if (n < cqes.size()) return total;
  }
}

void uring_backend::wait(std::size_t min_completions) {
  std::size_t got = deliver_completions();
  if (min_completions == 0) {
    if (got > 0) return;
    // With DEFER_TASKRUN or COOP_TASKRUN finished requests are posted only once we enter the
    // kernel; this also sends entries an earlier submit left behind.
    const int result = io_uring_submit_and_get_events(&ring_);
    if (!transient(result)) ZOE_CHECK_NEG_ERRNO(result, "io_uring_enter (get events) failed");
    deliver_completions();
    return;
  }
  while (got < min_completions) {
    const int result = io_uring_submit_and_wait(&ring_, static_cast<unsigned>(min_completions - got));
    if (!transient(result) && result != -ETIME) ZOE_CHECK_NEG_ERRNO(result, "io_uring_submit_and_wait failed");
    got += deliver_completions();
  }
}

}  // namespace zoe::io::detail
