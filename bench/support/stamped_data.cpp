#include "stamped_data.hpp"

#include <cstring>

#include "zoe/core/str.hpp"

namespace zoe::bench {
namespace {

constexpr std::uint64_t magic = 0x48434e4542454f5aULL;  // "ZOEBENCH"

struct stamp_words {
  std::uint64_t magic;
  std::uint64_t seed;
  std::uint64_t offset;
  std::uint64_t check;
};
static_assert(sizeof(stamp_words) == 32);

constexpr std::uint64_t check_word(std::uint64_t seed, std::uint64_t offset) noexcept {
  return (seed * 0x9E3779B97F4A7C15ULL) ^ (offset + 0x632BE59BD9B4E019ULL) ^ magic;
}

std::uint64_t splitmix(std::uint64_t& s) noexcept {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

stamped_data::stamped_data(std::uint64_t seed) : seed_(seed), body_(sector_size - sizeof(stamp_words)) {
  std::uint64_t s = seed;
  for (std::size_t i = 0; i < body_.size(); i += 8) {
    const std::uint64_t v = splitmix(s);
    std::memcpy(body_.data() + i, &v, std::min<std::size_t>(8, body_.size() - i));
  }
}

void stamped_data::fill_bodies(std::span<std::byte> buffer) const {
  for (std::size_t at = 0; at + sector_size <= buffer.size(); at += sector_size) {
    std::memcpy(buffer.data() + at + sizeof(stamp_words), body_.data(), body_.size());
  }
}

void stamped_data::stamp(std::span<std::byte> buffer, std::uint64_t file_offset) const {
  for (std::size_t at = 0; at + sector_size <= buffer.size(); at += sector_size) {
    const stamp_words w{magic, seed_, file_offset + at, check_word(seed_, file_offset + at)};
    std::memcpy(buffer.data() + at, &w, sizeof w);
  }
}

std::optional<std::uint64_t> stamped_data::seed_of(std::span<const std::byte> sector) {
  if (sector.size() < sizeof(stamp_words)) return std::nullopt;
  stamp_words w{};
  std::memcpy(&w, sector.data(), sizeof w);
  if (w.magic != magic || w.check != check_word(w.seed, w.offset)) return std::nullopt;
  return w.seed;
}

std::optional<std::string> stamped_data::check(std::span<const std::byte> buffer, std::uint64_t file_offset) const {
  for (std::size_t at = 0; at + sector_size <= buffer.size(); at += sector_size) {
    const std::uint64_t where = file_offset + at;
    stamp_words w{};
    std::memcpy(&w, buffer.data() + at, sizeof w);
    if (w.magic != magic || w.check != check_word(w.seed, w.offset)) {
      return str("at offset ", where, ": the sector stamp is damaged or missing (changed data)");
    }
    if (w.offset != where) {
      return str("at offset ", where, ": the sector was written for offset ", w.offset, " (moved data)");
    }
    if (w.seed != seed_) {
      return str("at offset ", where, ": the sector belongs to run seed ", w.seed, ", its neighbours to seed ", seed_,
                 " (a torn or partly rewritten block)");
    }
    if (std::memcmp(buffer.data() + at + sizeof w, body_.data(), body_.size()) != 0) {
      return str("at offset ", where, ": the sector's contents changed");
    }
  }
  return std::nullopt;
}

}  // namespace zoe::bench
