#include "zoe/allocators/poison.hpp"

namespace zoe::allocators {

// Decided where the allocators are compiled, so every caller agrees with what they do.
bool poisons_freed_memory() noexcept {
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

}  // namespace zoe::allocators
