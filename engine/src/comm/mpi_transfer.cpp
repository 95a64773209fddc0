// Posting and polling one collective's point-to-point messages.
#include "mpi_transfer.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "backoff.hpp"
#include "mpi_runtime.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

// MPI counts are ints: larger messages travel as pieces of at most 1 GiB under the same tag, which
// MPI delivers in order between one pair of ranks.
constexpr std::uint64_t max_piece = std::uint64_t{1} << 30;
// How long the cancelled receives of a failed exchange get to finish cancelling.
constexpr auto cancel_wait = std::chrono::milliseconds(200);

std::string seconds(std::chrono::milliseconds t) { return str(static_cast<double>(t.count()) / 1000.0, " s"); }

}  // namespace

std::string mpi_group_view::describe_rank(std::size_t group_rank) const {
  const std::size_t w = (*world_ranks)[group_rank];
  return str("rank ", group_rank, " (world rank ", w, ", node ", w / ranks_per_node, ")");
}

std::string mpi_group_view::describe_world_rank(std::size_t world_rank) const {
  const auto it = std::find(world_ranks->begin(), world_ranks->end(), world_rank);
  if (it != world_ranks->end()) return describe_rank(static_cast<std::size_t>(it - world_ranks->begin()));
  return str("world rank ", world_rank, " (node ", world_rank / ranks_per_node, ")");
}

mpi_exchange::mpi_exchange(const mpi_group_view& group, int tag, std::string what) noexcept
    : group_(&group), tag_(tag), what_(std::move(what)) {}

void mpi_exchange::send(std::size_t peer, const void* data, std::uint64_t bytes) {
  // MPI_Isend takes a non-const buffer only for old bindings; it never writes it.
  messages_.push_back({peer, true, static_cast<std::byte*>(const_cast<void*>(data)), bytes});  // NOLINT
}

void mpi_exchange::receive(std::size_t peer, void* data, std::uint64_t bytes) {
  messages_.push_back({peer, false, static_cast<std::byte*>(data), bytes});
}

void mpi_exchange::post(std::vector<MPI_Request>& requests, std::vector<std::size_t>& owner) {
  mpi_runtime& rt = mpi_runtime::instance();
  const auto mpi = rt.serialize();
  // Receives first, so a peer's message finds its buffer posted.
  for (const bool sends : {false, true}) {
    for (std::size_t m = 0; m < messages_.size(); ++m) {
      message& msg = messages_[m];
      if (msg.is_send != sends) continue;
      std::uint64_t offset = 0;
      do {
        const std::uint64_t piece = std::min(max_piece, msg.bytes - offset);
        MPI_Request r = MPI_REQUEST_NULL;
        const int count = static_cast<int>(piece);
        const int peer = static_cast<int>(msg.peer);
        const int rc = msg.is_send ? MPI_Isend(msg.data + offset, count, MPI_BYTE, peer, tag_, group_->comm, &r)
                                   : MPI_Irecv(msg.data + offset, count, MPI_BYTE, peer, tag_, group_->comm, &r);
        if (rc != MPI_SUCCESS) {
          fail_waiting(requests, owner,
                       str(msg.is_send ? "posting the send to " : "posting the receive from ",
                           group_->describe_rank(msg.peer), " failed"),
                       msg.peer);
        }
        if (msg.is_send) {
          // Counted once MPI holds the send: these are the bytes this rank hands the transport.
          const std::size_t my_node = (*group_->world_ranks)[group_->rank] / group_->ranks_per_node;
          const std::size_t dest_node = (*group_->world_ranks)[msg.peer] / group_->ranks_per_node;
          (dest_node == my_node ? handed_.intra_node : handed_.inter_node) += piece;
        }
        requests.push_back(r);
        owner.push_back(m);
        piece_bytes_.push_back(piece);
        ++msg.pending;
        offset += piece;
      } while (offset < msg.bytes);
    }
  }
}

void mpi_exchange::run() {
  std::vector<MPI_Request> requests;
  std::vector<std::size_t> owner;  // message of each request
  requests.reserve(messages_.size());
  owner.reserve(messages_.size());
  post(requests, owner);

  mpi_runtime& rt = mpi_runtime::instance();
  const auto deadline = std::chrono::steady_clock::now() + group_->timeout;
  std::vector<int> done(requests.size());
  std::vector<MPI_Status> statuses(requests.size());
  std::size_t remaining = requests.size();
  backoff wait;
  // A failure notice fails the exchange only once a poll after it made no progress: the notice
  // travels on a communicator of its own, and a part its sender sent before failing may be matched
  // by the same progress call that found the notice (that part is then complete, not missing).
  bool notice_seen = false;
  while (remaining > 0) {
    int count = 0;
    int rc = MPI_SUCCESS;
    {
      const auto mpi = rt.serialize();
      rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &count, done.data(), statuses.data());
    }
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
      fail_waiting(requests, owner, "MPI_Testsome failed", group_->rank);
    if (count != MPI_UNDEFINED && count > 0) {
      for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
        const auto request = static_cast<std::size_t>(done[i]);
        check_completed(requests, owner, request, statuses[i], rc == MPI_ERR_IN_STATUS);
        --messages_[owner[request]].pending;
      }
      remaining -= static_cast<std::size_t>(count);
      continue;  // progress: poll again at once
    }
    if (const auto notice = rt.poll_notice()) {
      if (notice_seen) {
        // A sender that skips MPI_Finalize (it saw a peer die or go silent) would hang ours.
        if (notice->sender_skips_finalize) rt.record_failure();
        fail_waiting(requests, owner,
                     str(group_->describe_world_rank(notice->world_rank), " failed: ", notice->message), std::nullopt);
      }
      notice_seen = true;
      continue;  // poll once more before failing
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      auto [why, culprit] = missing_peers();
      fail_waiting(requests, owner, why, culprit);
    }
    wait.pause();
  }
  messages_.clear();
  piece_bytes_.clear();
}

void mpi_exchange::check_completed(std::vector<MPI_Request>& requests, const std::vector<std::size_t>& owner,
                                   std::size_t request, const MPI_Status& status, bool status_has_error) {
  const message& msg = messages_[owner[request]];
  if (status_has_error && status.MPI_ERROR != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(status.MPI_ERROR, text, &length);
    fail_waiting(requests, owner,
                 str(msg.is_send ? "the send to " : "the receive from ", group_->describe_rank(msg.peer),
                     " failed: ", std::string_view(text, static_cast<std::size_t>(length))),
                 msg.peer);
  }
  if (msg.is_send) return;
  // A part of another size means the ranks disagree on the collective (its size, or the order of
  // the group's collectives): fail naming the peer rather than hand back wrong data.
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  if (static_cast<std::uint64_t>(got) != piece_bytes_[request]) {
    fail_waiting(requests, owner,
                 str(group_->describe_rank(msg.peer), " sent ", got, " bytes where ", piece_bytes_[request],
                     " were expected: the ranks disagree on this collective's size or on the order of the group's "
                     "collectives"),
                 msg.peer);
  }
}

std::pair<std::string, std::size_t> mpi_exchange::missing_peers() const {
  // Parts that did not arrive name their senders; when everything arrived, the peers that did not
  // take this rank's part are named instead (a rendezvous send waits for the peer's receive).
  for (const bool sends : {false, true}) {
    std::string peers;
    std::size_t first = group_->rank;
    std::size_t silent = 0;
    for (const message& msg : messages_) {
      if (msg.is_send != sends || msg.pending == 0) continue;
      if (peers.empty()) first = msg.peer;
      const std::string who = group_->describe_rank(msg.peer);
      if (peers.find(who) != std::string::npos) continue;
      peers += peers.empty() ? who : str(", ", who);
      ++silent;
    }
    if (!peers.empty()) {
      // The culprit the others are told of: one silent peer is it; when several are silent, this
      // rank is most likely the one out of step (it skipped or reordered a collective they issued).
      return {str(peers, sends ? " took nothing for " : " sent nothing for ", seconds(group_->timeout)),
              silent == 1 ? first : group_->rank};
    }
  }
  return {"the exchange did not finish", group_->rank};
}

void mpi_exchange::fail_waiting(std::vector<MPI_Request>& requests, const std::vector<std::size_t>& owner,
                                const std::string& why, std::optional<std::size_t> culprit) {
  mpi_runtime& rt = mpi_runtime::instance();
  // A failure seen here (a peer silent or a transfer failed) may be a dead peer, on which
  // MPI_Finalize would hang; run() recorded one announced if the announcer skips MPI_Finalize.
  if (culprit) rt.record_failure();
  {
    // Receives are cancelled (their buffers may be gone once the caller returns); sends cannot be
    // cancelled in Open MPI, so they are freed and left to finish or die with their peer.
    const auto mpi = rt.serialize();
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;
      const bool is_send = i < owner.size() ? messages_[owner[i]].is_send : true;
      if (is_send) {
        MPI_Request_free(&requests[i]);
      } else {
        MPI_Cancel(&requests[i]);
      }
    }
  }
  const auto until = std::chrono::steady_clock::now() + cancel_wait;
  backoff wait;
  for (;;) {
    int all = 0;
    {
      const auto mpi = rt.serialize();
      if (MPI_Testall(static_cast<int>(requests.size()), requests.data(), &all, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        break;
      }
    }
    if (all != 0 || std::chrono::steady_clock::now() >= until) break;
    wait.pause();
  }
  messages_.clear();
  piece_bytes_.clear();
  const std::string text = str(what_, ": ", why);
  // The other ranks learn of it at once, instead of each waiting for its own timeout.
  if (culprit) rt.announce_failure((*group_->world_ranks)[*culprit], text);
  throw comm_error(text);
}

}  // namespace zoe::engine::detail
