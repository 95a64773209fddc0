// The element counts the bench flags take: decimal suffixes, and errors naming the flag.
#include "support/counts.hpp"

#include <gtest/gtest.h>

#include "zoe/core/error.hpp"

namespace zoe::bench {
namespace {

TEST(parse_count, DecimalSuffixesAndPlainNumbers) {
  EXPECT_EQ(parse_count("256M", "--params"), 256'000'000U);
  EXPECT_EQ(parse_count("1.5G", "--params"), 1'500'000'000U);
  EXPECT_EQ(parse_count("125k", "--params"), 125'000U);
  EXPECT_EQ(parse_count("7B", "--params"), 7'000'000'000U);
  EXPECT_EQ(parse_count("1e6", "--params"), 1'000'000U);
  EXPECT_EQ(parse_count("4096", "--params"), 4096U);
}

TEST(parse_count, RefusesWhatIsNoCountNamingTheFlag) {
  for (const char* text : {"12parsecs", "0", "-3", "", "M", "0.1", "2e15"}) {
    try {
      (void)parse_count(text, "--sub-group-size");
      ADD_FAILURE() << "'" << text << "' was taken";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("--sub-group-size"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zoe::bench
