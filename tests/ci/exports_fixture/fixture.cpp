// A library shaped like libzoe_c.so for c_api_exports_test.sh to check: a C entry point and the C++
// behind it. Built twice (tests/ci/CMakeLists.txt): with hidden visibility and a version script it
// must pass the check; with default visibility the C++ function and std:: instantiations leak and
// the check must name them.
#include <string>
#include <vector>

namespace zoe::ci {

// The C++ the C entry point wraps; exported only when visibility is left at its default.
int fixture_leaked_function(int count) {
  const std::vector<std::string> names(static_cast<std::size_t>(count), "x");
  return static_cast<int>(names.size());
}

}  // namespace zoe::ci

extern "C" __attribute__((visibility("default"))) int zoe_fixture_entry(int count) {
  return zoe::ci::fixture_leaked_function(count);
}
