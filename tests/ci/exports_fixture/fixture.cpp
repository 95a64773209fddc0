// A library shaped like libzoe_c.so for c_api_exports_test.sh to check: a C entry point and the C++
// behind it. Built twice (tests/ci/CMakeLists.txt): with hidden visibility and a version script it
// must pass the check; with default visibility the C++ function and std:: instantiations leak and
// the check must name them.
#include <cstddef>
#include <vector>

namespace zoe::ci {

// The element of the std:: instantiation below: a type of our own, so that no other library (not
// libstdc++ itself) provides or declares that instantiation extern.
struct fixture_record {
  int value;
};

// The C++ the C entry point wraps; exported only when visibility is left at its default.
int fixture_leaked_function(int count) {
  const std::vector<fixture_record> records(static_cast<std::size_t>(count), fixture_record{1});
  return static_cast<int>(records.size());
}

}  // namespace zoe::ci

// An explicit instantiation definition: the compiler must emit every member of std::vector for it,
// at every optimization level. An implicit one (the use above alone) is inlined away at -O3 and
// leaves no std:: symbol, so the self test could not show that the checker names leaked std::
// instantiations, which libzoe_c.so's C++ (engine/, with its containers) would leak without its
// version script.
template class std::vector<zoe::ci::fixture_record>;

extern "C" __attribute__((visibility("default"))) int zoe_fixture_entry(int count) {
  return zoe::ci::fixture_leaked_function(count);
}
