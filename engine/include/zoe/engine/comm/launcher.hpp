#pragma once
// Where an MPI launcher placed this process, as it announces it in the environment before MPI
// starts: the one reading of those variables, for make_communicator's `auto` choice and the C API's
// zoe_launcher_ranks alike.

#include <cstdint>
#include <optional>

namespace zoe::engine {

/// One process's place in a launch. Variable names are static strings, for messages.
struct launcher_ranks {
  std::uint32_t rank = 0;
  /// The world size; nullopt under a PMIx launcher that set only PMIX_RANK (it tells the size
  /// through MPI only, so the launch counts as many ranks).
  std::optional<std::uint32_t> size;
  /// Ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE); nullopt when the launcher gives none.
  std::optional<std::uint32_t> local_size;
  const char* rank_variable = "";  ///< the variable the rank came from
  const char* size_variable = "";  ///< the variable the size came from ("" without one)

  /// Whether the launch has more than one rank (or an unknown number, under PMIx). Never throws.
  [[nodiscard]] bool many() const noexcept { return !size || *size > 1; }

  /// Where the launch placed this rank, by communicator.hpp's rule (rank r on node
  /// r / ranks_per_node, local rank r % ranks_per_node). ranks_per_node is local_size where it
  /// divides the size; else (none given, or nodes of unequal sizes, which have no one
  /// ranks_per_node) the whole world counts as one node. Needs size (usage_error under PMIx alone).
  struct placement {
    std::uint32_t ranks_per_node = 1;
    std::uint32_t node = 0;
    std::uint32_t local_rank = 0;
    std::uint32_t nodes = 1;
  };
  [[nodiscard]] placement place() const;
};

/// The launcher's view from the environment: Open MPI's mpirun (OMPI_COMM_WORLD_SIZE, _RANK,
/// _LOCAL_SIZE) first, as it may set the other families too; else PMI (PMI_SIZE, PMI_RANK: MPICH's
/// Hydra, Slurm); else PMIx (PMIX_RANK). nullopt when none is set. Throws config_error naming the
/// variable when one is not an unsigned 32-bit number, when a size comes without its rank, when
/// the size is 0 or the rank is not below it. Reads the environment only.
[[nodiscard]] std::optional<launcher_ranks> launcher_environment();

}  // namespace zoe::engine
