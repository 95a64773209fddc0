#include "io_targets.hpp"

#include <algorithm>
#include <iterator>

#include "zoe/core/str.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/swap_channel.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::bench {
namespace {

class raw_target final : public io_target {
 public:
  raw_target(const std::filesystem::path& dir, std::uint64_t size, bool buffered, const std::string& engine,
             const io::engine_options& options, std::size_t threads)
      : file_(dir / "zoe-bench.dat", io::open_mode::read_write, io::file_options{.create = true, .direct = !buffered}),
        size_(size) {
    for (std::size_t t = 0; t < threads; ++t) {
      io::backend_choice choice = io::choose_backend(engine, options);
      if (t == 0) choice_ = std::move(choice.explanation);
      engines_.push_back(std::make_unique<io::io_engine>(std::move(choice.backend), options));
    }
    early_.resize(threads);
  }

  [[nodiscard]] std::string mode() const override { return "raw"; }
  [[nodiscard]] std::string engine_name() const override { return std::string(engines_[0]->backend_name()); }
  [[nodiscard]] bool direct() const override { return file_.direct(); }
  [[nodiscard]] std::string where() const override { return file_.path().string(); }
  [[nodiscard]] bool holds_earlier_run() const override { return file_.logical_size() >= size_; }
  [[nodiscard]] std::string setup_note() const override { return choice_; }

  // The engine starts I/O only inside poll and wait: poll right after each submit, so the drive
  // works on this request while the thread stamps the next buffer, as the swap channel does.
  // Completions that poll brings back wait in early_ for the next wait().
  void submit(std::size_t thread, io::io_op op, std::span<std::byte> buffer, std::uint64_t offset,
              std::uint64_t tag) override {
    engines_[thread]->submit({op, &file_, buffer, offset, tag});
    engines_[thread]->poll(early_[thread]);
  }
  void wait(std::size_t thread, std::vector<io::io_completion>& out) override {
    if (early_[thread].empty()) {
      engines_[thread]->wait(out, 1);
      return;
    }
    std::move(early_[thread].begin(), early_[thread].end(), std::back_inserter(out));
    early_[thread].clear();
  }
  [[nodiscard]] std::size_t outstanding(std::size_t thread) const override {
    return engines_[thread]->outstanding() + early_[thread].size();
  }
  void after_write() override {
    if (!file_.direct()) file_.sync();  // buffered: the figure includes reaching the drive
  }
  void register_buffers(std::span<const std::span<std::byte>> regions) override {
    for (auto& e : engines_) e->register_buffers(regions);
  }

 private:
  io::file file_;
  std::uint64_t size_;
  std::string choice_;  ///< why "auto" took the backend it took
  std::vector<std::unique_ptr<io::io_engine>> engines_;
  std::vector<std::vector<io::io_completion>> early_;  ///< per thread: completions poll returned early
};

class store_target final : public io_target {
 public:
  store_target(const std::filesystem::path& dir, std::uint64_t size, bool buffered, const std::string& engine,
               const io::engine_options& options, std::size_t threads)
      : store_([&] {
          io::swap_store_options o;
          o.paths = {dir};
          o.capacity = size;
          o.engine = engine;
          o.io = options;
          o.direct = !buffered;
          return o;
        }()),
        extent_(store_.allocate(size)) {
    for (std::size_t t = 0; t < threads; ++t) channels_.push_back(std::make_unique<io::swap_channel>(store_));
  }

  [[nodiscard]] std::string mode() const override { return "store"; }
  [[nodiscard]] std::string engine_name() const override { return std::string(channels_[0]->backend_name()); }
  [[nodiscard]] bool direct() const override { return store_.direct(); }
  [[nodiscard]] std::string where() const override { return str(store_.folders()[0].string(), " (swap store)"); }
  [[nodiscard]] bool holds_earlier_run() const override { return false; }
  [[nodiscard]] std::string setup_note() const override {
    return str("swap files written once at creation in ", store_.prewrite_seconds(),
               " s, so timed writes overwrite (ext4 converts fallocated extents on first write)");
  }

  void submit(std::size_t thread, io::io_op op, std::span<std::byte> buffer, std::uint64_t offset,
              std::uint64_t tag) override {
    channels_[thread]->submit({op, extent_, offset, buffer, tag});
  }
  void wait(std::size_t thread, std::vector<io::io_completion>& out) override { channels_[thread]->wait(out, 1); }
  [[nodiscard]] std::size_t outstanding(std::size_t thread) const override { return channels_[thread]->outstanding(); }
  void register_buffers(std::span<const std::span<std::byte>> regions) override {
    for (auto& c : channels_) c->register_buffers(regions);
  }

 private:
  io::swap_store store_;
  io::swap_extent extent_;
  std::vector<std::unique_ptr<io::swap_channel>> channels_;
};

}  // namespace

std::unique_ptr<io_target> make_raw_target(const std::filesystem::path& dir, std::uint64_t size, bool buffered,
                                           const std::string& engine, const io::engine_options& options,
                                           std::size_t threads) {
  return std::make_unique<raw_target>(dir, size, buffered, engine, options, threads);
}

std::unique_ptr<io_target> make_store_target(const std::filesystem::path& dir, std::uint64_t size, bool buffered,
                                             const std::string& engine, const io::engine_options& options,
                                             std::size_t threads) {
  return std::make_unique<store_target>(dir, size, buffered, engine, options, threads);
}

}  // namespace zoe::bench
