#pragma once
// A typed fixture: one engine on `Backend` under a fault_injecting_backend driven by plan_, and one
// file f.dat in a scratch folder. Skips when the backend cannot start on this machine.
#include <gtest/gtest.h>

#include <exception>
#include <memory>

#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/io_engine.hpp"

namespace zoe::testing {

template <typename Backend>
class faulty_engine_fixture : public ::testing::Test {
 protected:
  explicit faulty_engine_fixture(io::engine_options options) : options_(options) {}

  void SetUp() override {
    std::unique_ptr<io::io_backend> inner;
    try {
      inner = Backend::make(options_);
    } catch (const std::exception& e) {
      GTEST_SKIP() << e.what();
    }
    engine_ =
        std::make_unique<io::io_engine>(std::make_unique<fault_injecting_backend>(std::move(inner), plan_), options_);
    file_ = std::make_unique<io::file>(dir_ / "f.dat", io::open_mode::read_write, io::file_options{.create = true});
  }

  io::engine_options options_;
  scratch_dir dir_;
  std::shared_ptr<fault_plan> plan_ = std::make_shared<fault_plan>();
  std::unique_ptr<io::io_engine> engine_;
  std::unique_ptr<io::file> file_;
};

}  // namespace zoe::testing
