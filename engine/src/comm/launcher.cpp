// The launcher's environment (launcher.hpp).
#include "zoe/engine/comm/launcher.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {
namespace {

// The unsigned number in environment variable `name`; nullopt when unset; config_error naming it
// when it holds anything else (a launcher that sets garbage is misconfigured, not absent).
std::optional<std::uint32_t> environment_number(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 ||
      value > std::numeric_limits<std::uint32_t>::max()) {
    throw config_error(str("the environment variable ", name, " is '", text, "', not a rank or a count"));
  }
  return static_cast<std::uint32_t>(value);
}

// A rank that must be set alongside its family's size.
std::uint32_t required_rank(const char* name, const char* size_name) {
  const std::optional<std::uint32_t> rank = environment_number(name);
  if (!rank) throw config_error(str("the environment sets ", size_name, " but not ", name, ": which rank is this?"));
  return *rank;
}

}  // namespace

std::optional<launcher_ranks> launcher_environment() {
  launcher_ranks out;
  if (const std::optional<std::uint32_t> size = environment_number("OMPI_COMM_WORLD_SIZE")) {
    out.size = size;
    out.size_variable = "OMPI_COMM_WORLD_SIZE";
    out.rank_variable = "OMPI_COMM_WORLD_RANK";
    out.rank = required_rank(out.rank_variable, out.size_variable);
    out.local_size = environment_number("OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (const std::optional<std::uint32_t> pmi_size = environment_number("PMI_SIZE")) {
    out.size = pmi_size;
    out.size_variable = "PMI_SIZE";
    out.rank_variable = "PMI_RANK";
    out.rank = required_rank(out.rank_variable, out.size_variable);
  } else if (const std::optional<std::uint32_t> pmix_rank = environment_number("PMIX_RANK")) {
    out.rank = *pmix_rank;
    out.rank_variable = "PMIX_RANK";
    return out;
  } else {
    return std::nullopt;
  }
  if (*out.size == 0 || out.rank >= *out.size) {
    throw config_error(str("the launcher's environment gives rank ", out.rank, " (", out.rank_variable, ") of ",
                           *out.size, " (", out.size_variable, "): the rank must be below the size"));
  }
  return out;
}

launcher_ranks::placement launcher_ranks::place() const {
  ZOE_EXPECTS(size.has_value(), "the launcher set ", rank_variable,
              " but no world size (PMIx tells it through MPI only): the ranks' nodes are not known before MPI starts");
  const std::uint32_t local = local_size.value_or(*size);
  const std::uint32_t per_node = local > 0 && *size % local == 0 ? local : *size;
  return {
      .ranks_per_node = per_node, .node = rank / per_node, .local_rank = rank % per_node, .nodes = *size / per_node};
}

}  // namespace zoe::engine
