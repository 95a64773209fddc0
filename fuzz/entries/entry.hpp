#pragma once
// What every fuzz entry function (fuzz/entries) shares. An entry is what one libFuzzer target of
// fuzz/targets runs on one input; the entries are libraries of their own, so that the regression
// cases in tests/ feed a crashing input through the very same code under the ordinary gcc builds
// and ASan+UBSan.
//
// Contract of every entry: any input is valid. An input zoe refuses (a zoe::error, a non-success
// status) is an ordinary outcome. A bug is an exception of any other type escaping (an
// invariant_failure below, a foreign exception from inside zoe), or a sanitizer report or crash:
// libFuzzer records it as a crash, GoogleTest as a failed case.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

namespace zoe::fuzz {

/// A property the entry checks did not hold: a bug in zoe, named by the message.
class invariant_failure : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// What an input came to.
enum class outcome : std::uint8_t {
  refused = 0,   ///< zoe refused it with a clear error (the expected fate of most inputs)
  accepted = 1,  ///< zoe took it: the config parsed and planned, the checkpoint loaded, ...
};

/// The bytes of a file (a corpus or regression input). Throws std::runtime_error naming the path.
[[nodiscard]] inline std::vector<std::uint8_t> read_input(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path.string() + "'");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace zoe::fuzz
