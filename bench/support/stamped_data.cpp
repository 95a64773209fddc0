#include "stamped_data.hpp"

#include <array>
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

constexpr std::size_t body_bytes = sector_size - sizeof(stamp_words);

std::uint64_t splitmix(std::uint64_t& s) noexcept {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The base body of the sector at `place` bytes into its buffer: four xorshift64 streams side by
// side, seeded from the run's seed and the place. Shifts and xors over four lanes vectorize; the
// quality only has to defeat compression (dedup is defeated by the stamp and scramble words).
void make_base(std::byte* out, std::uint64_t seed, std::uint64_t place) noexcept {
  constexpr std::size_t lanes = 4;
  static_assert(body_bytes % (lanes * sizeof(std::uint64_t)) == 0);
  std::uint64_t key = seed ^ (place * 0xD1B54A32D192ED03ULL);
  std::uint64_t lane[lanes];
  for (auto& x : lane) x = splitmix(key) | 1;  // xorshift never leaves zero
  for (std::size_t at = 0; at < body_bytes; at += sizeof lane) {
    for (auto& x : lane) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    std::memcpy(out + at, lane, sizeof lane);
  }
}

// One word per 512 bytes of a sector's body, keyed by the seed and the sector's file offset, as
// fio's scramble_buffers: with the stamp it makes every sector of a run unique. The first sits just
// after the stamp; the others at each later 512-byte boundary.
constexpr std::size_t scramble_stride = 512;
constexpr std::size_t scramble_words = sector_size / scramble_stride;

void scramble(std::byte* sector, std::uint64_t seed, std::uint64_t offset) noexcept {
  std::uint64_t key = seed ^ (offset * 0x9FB21C651E98DF25ULL) ^ 0x5851F42D4C957F2DULL;
  for (std::size_t k = 0; k < scramble_words; ++k) {
    const std::uint64_t word = splitmix(key);
    const std::size_t at = k == 0 ? sizeof(stamp_words) : k * scramble_stride;
    std::memcpy(sector + at, &word, sizeof word);
  }
}

// The body `check` expects: the base of its place, scrambled for its offset.
void make_body(std::byte* out, std::uint64_t seed, std::uint64_t place, std::uint64_t offset) noexcept {
  std::array<std::byte, sector_size> sector;
  make_base(sector.data() + sizeof(stamp_words), seed, place);
  scramble(sector.data(), seed, offset);
  std::memcpy(out, sector.data() + sizeof(stamp_words), body_bytes);
}

}  // namespace

void stamped_data::lay_bodies(std::span<std::byte> buffer) const noexcept {
  for (std::size_t at = 0; at + sector_size <= buffer.size(); at += sector_size) {
    make_base(buffer.data() + at + sizeof(stamp_words), seed_, at);
  }
}

void stamped_data::stamp(std::span<std::byte> buffer, std::uint64_t file_offset) const noexcept {
  for (std::size_t at = 0; at + sector_size <= buffer.size(); at += sector_size) {
    const stamp_words w{magic, seed_, file_offset + at, check_word(seed_, file_offset + at)};
    std::memcpy(buffer.data() + at, &w, sizeof w);
    scramble(buffer.data() + at, seed_, file_offset + at);
  }
}

void stamped_data::fill(std::span<std::byte> buffer, std::uint64_t file_offset) const noexcept {
  lay_bodies(buffer);
  stamp(buffer, file_offset);
}

std::optional<std::uint64_t> stamped_data::seed_of(std::span<const std::byte> sector) {
  if (sector.size() < sizeof(stamp_words)) return std::nullopt;
  stamp_words w{};
  std::memcpy(&w, sector.data(), sizeof w);
  if (w.magic != magic || w.check != check_word(w.seed, w.offset)) return std::nullopt;
  return w.seed;
}

std::optional<std::string> stamped_data::check(std::span<const std::byte> buffer, std::uint64_t file_offset) const {
  std::array<std::byte, body_bytes> body;
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
    make_body(body.data(), seed_, at, where);
    if (std::memcmp(buffer.data() + at + sizeof w, body.data(), body.size()) != 0) {
      return str("at offset ", where, ": the sector's contents changed");
    }
  }
  return std::nullopt;
}

}  // namespace zoe::bench
