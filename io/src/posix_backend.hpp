#pragma once
// The portable backend: a pool of threads doing pread/pwrite. Each thread carries one request at
// a time, so the pool has queue_depth x intra_op_parallelism threads (at most 128): that many
// requests are in flight, as with the asynchronous backends.

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "zoe/io/engine_options.hpp"
#include "zoe/io/io_backend.hpp"

namespace zoe::io::detail {

class posix_backend final : public io_backend {
 public:
  explicit posix_backend(const engine_options& options);
  ~posix_backend() override;

  [[nodiscard]] std::string_view name() const noexcept override { return "posix"; }
  [[nodiscard]] std::size_t capacity() const noexcept override { return workers_.size(); }
  void submit(std::span<const raw_op> ops) override;
  std::size_t reap(std::vector<raw_result>& out, std::size_t min_results) override;
  void notify_on_result(int eventfd) override;

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable has_work_;
  std::condition_variable has_results_;
  std::deque<raw_op> queue_;
  std::vector<raw_result> results_;
  bool stopping_ = false;
  int notify_fd_ = -1;
  std::vector<std::jthread> workers_;
};

}  // namespace zoe::io::detail
