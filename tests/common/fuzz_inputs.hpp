#pragma once
// The inputs a fuzz target's regression cases replay through its entry function (fuzz/entries):
// the seed corpus fuzz/corpus/<target>/ and the crash inputs recorded in fuzz/regressions/<target>/,
// one GoogleTest case (so one CTest entry) per file. ZOE_FUZZ_DIR is the source folder fuzz/.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace zoe::testing {

/// Every file of fuzz/corpus/<target> and fuzz/regressions/<target>, in name order.
inline std::vector<std::filesystem::path> fuzz_inputs(std::string_view target) {
  std::vector<std::filesystem::path> out;
  for (const char* kind : {"corpus", "regressions"}) {
    const std::filesystem::path folder = std::filesystem::path(ZOE_FUZZ_DIR) / kind / target;
    if (!std::filesystem::exists(folder)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.is_regular_file()) out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// "corpus_<file>" or "regressions_<file>", every character GoogleTest refuses in a name made '_'.
inline std::string fuzz_input_name(const ::testing::TestParamInfo<std::filesystem::path>& info) {
  std::string name = info.param.parent_path().parent_path().filename().string() + "_" + info.param.filename().string();
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

}  // namespace zoe::testing
