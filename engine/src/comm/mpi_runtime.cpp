// Process-wide MPI: initialisation, the serialising lock, finalize at exit and failure notices.
#include "mpi_runtime.hpp"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "backoff.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

constexpr int notice_tag = 1;
constexpr std::size_t notice_max_chars = 480;  // a notice is one short eager message
constexpr auto notice_send_wait = std::chrono::seconds(1);

std::string error_string(int rc) {
  std::string text(MPI_MAX_ERROR_STRING, '\0');
  int length = 0;
  if (MPI_Error_string(rc, text.data(), &length) != MPI_SUCCESS) return str("MPI error ", rc);
  text.resize(static_cast<std::size_t>(length));
  return text;
}

// "<culprit> <1 when the sender skips MPI_Finalize, else 0> <message>"; a notice without that
// header blames its sender, which is taken to skip MPI_Finalize.
peer_notice parse_notice(std::size_t sender, const std::string& text) {
  std::size_t culprit = 0;
  int skips = 1;
  const char* const end = text.data() + text.size();
  const auto [after_culprit, ec] = std::from_chars(text.data(), end, culprit);
  if (ec != std::errc() || end - after_culprit < 3 || after_culprit[0] != ' ' || after_culprit[2] != ' ') {
    return {sender, true, text};
  }
  const auto [after_flag, ec_flag] = std::from_chars(after_culprit + 1, end, skips);
  if (ec_flag != std::errc()) return {sender, true, text};
  return {culprit, skips != 0, std::string(after_flag + 1, end)};
}

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return str("thread level ", level);
  }
}

}  // namespace

void check_mpi(int rc, std::string_view what) {
  if (rc != MPI_SUCCESS) throw comm_error(str(what, ": ", error_string(rc)));
}

mpi_runtime& mpi_runtime::instance() {
  // Never destroyed: finalize_at_exit runs after static destructors that may still use it.
  static mpi_runtime* const runtime = new mpi_runtime();  // NOLINT(cppcoreguidelines-owning-memory)
  return *runtime;
}

mpi_runtime::mpi_runtime() {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "mpi: MPI_Initialized");
  if (initialized == 0) {
    int provided = MPI_THREAD_SINGLE;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "mpi: MPI_Init_thread");
    serialized_ = provided < MPI_THREAD_MULTIPLE;
    std::atexit(finalize_at_exit);
  } else {
    // Someone else (the application) initialised MPI and finalizes it; we only ask what it gave.
    int provided = MPI_THREAD_SINGLE;
    check_mpi(MPI_Query_thread(&provided), "mpi: MPI_Query_thread");
    // zoe calls MPI from its stream workers and I/O threads (one at a time under its lock at best).
    if (provided < MPI_THREAD_SERIALIZED) {
      throw comm_error(str("mpi: the application initialised MPI with ", thread_level_name(provided),
                           "; zoe calls MPI from its own threads and needs at least MPI_THREAD_SERIALIZED: "
                           "initialise MPI with MPI_Init_thread asking for MPI_THREAD_MULTIPLE"));
    }
    serialized_ = provided < MPI_THREAD_MULTIPLE;
  }
  if (serialized_) log::info("mpi: MPI_THREAD_MULTIPLE not available; zoe serialises its MPI calls");
  int rank = 0;
  int size = 1;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "mpi: MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "mpi: MPI_Comm_size");
  world_rank_ = static_cast<std::size_t>(rank);
  world_size_ = static_cast<std::size_t>(size);
  void* tag_ub = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found), "mpi: MPI_TAG_UB");
  if (found != 0 && tag_ub != nullptr) tag_ub_ = *static_cast<int*>(tag_ub);
  // Errors come back as codes on zoe's own communicators (a failing transfer is a comm_error); the
  // application's MPI_COMM_WORLD keeps its error handler.
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &notice_comm_), "mpi: MPI_Comm_dup of the notice channel");
  check_mpi(MPI_Comm_set_errhandler(notice_comm_, MPI_ERRORS_RETURN), "mpi: MPI_Comm_set_errhandler");
}

void mpi_runtime::finalize_at_exit() noexcept {
  mpi_runtime& rt = instance();
  {
    const std::lock_guard lock(rt.notice_mutex_);
    if (rt.failed_) return;  // a dead peer would hang MPI_Finalize: exit without it
  }
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && finalized == 0) MPI_Finalize();
}

int mpi_runtime::next_creation_tag() noexcept {
  // Tags notice_tag + 1 .. tag_ub_, cycling.
  const std::uint64_t span = static_cast<std::uint64_t>(tag_ub_ - notice_tag);
  return notice_tag + 1 + static_cast<int>(creations_.fetch_add(1) % span);
}

std::unique_lock<std::mutex> mpi_runtime::serialize() {
  return serialized_ ? std::unique_lock(mpi_mutex_) : std::unique_lock<std::mutex>();
}

void mpi_runtime::record_failure() noexcept {
  const std::lock_guard lock(notice_mutex_);
  failed_ = true;
}

void mpi_runtime::announce_failure(std::size_t culprit, std::string_view message) noexcept {
  // The text outlives the sends: a send to a dead peer may never finish.
  static std::string text;
  bool skips_finalize = false;
  {
    const std::lock_guard lock(notice_mutex_);
    if (announced_) return;
    announced_ = true;
    skips_finalize = failed_;
  }
  try {
    // The receivers name the culprit, not this sender, and skip MPI_Finalize when this rank does.
    text = str(culprit, ' ', skips_finalize ? '1' : '0', ' ', message.substr(0, notice_max_chars));
    std::vector<MPI_Request> sends;
    {
      const auto mpi = serialize();
      for (std::size_t peer = 0; peer < world_size_; ++peer) {
        if (peer == world_rank_) continue;
        MPI_Request r = MPI_REQUEST_NULL;
        if (MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, static_cast<int>(peer), notice_tag,
                      notice_comm_, &r) == MPI_SUCCESS) {
          sends.push_back(r);
        }
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + notice_send_wait;
    backoff wait;
    for (;;) {
      int done = 0;
      {
        const auto mpi = serialize();
        if (MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
          break;
        }
      }
      if (done != 0 || std::chrono::steady_clock::now() >= deadline) break;
      wait.pause();
    }
    const auto mpi = serialize();
    for (MPI_Request& r : sends) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
  } catch (...) {
    log::error("mpi: the failure notice to the other ranks could not be sent");
  }
}

std::optional<peer_notice> mpi_runtime::poll_notice() noexcept {
  const std::lock_guard lock(notice_mutex_);
  if (notice_) return notice_;
  try {
    const auto mpi = serialize();
    int arrived = 0;
    MPI_Status status{};
    if (MPI_Iprobe(MPI_ANY_SOURCE, notice_tag, notice_comm_, &arrived, &status) != MPI_SUCCESS || arrived == 0) {
      return std::nullopt;
    }
    int chars = 0;
    MPI_Get_count(&status, MPI_CHAR, &chars);
    std::string text(static_cast<std::size_t>(chars > 0 ? chars : 0), '\0');
    MPI_Recv(text.data(), chars, MPI_CHAR, status.MPI_SOURCE, notice_tag, notice_comm_, MPI_STATUS_IGNORE);
    notice_ = parse_notice(static_cast<std::size_t>(status.MPI_SOURCE), text);
    return notice_;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace zoe::engine::detail
