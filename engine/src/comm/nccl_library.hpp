#pragma once
// NCCL loaded at run time: dlopen("libnccl.so.2") and every entry point the nccl backend calls,
// resolved by name, so zoe links neither NCCL nor CUDA for it and a machine without them still
// starts (only the nccl backend then refuses, naming the library). Compiled in every build.
//
// The few NCCL types the entry points take are declared here, layout- and value-compatible with
// nccl.h (NCCL 2.x; the values are those of nccl.h's ncclResult_t, ncclDataType_t and ncclRedOp_t
// enums and of NCCL_UNIQUE_ID_BYTES), so this compiles without nccl.h; nccl_communicator.cpp, built
// with the CUDA toolkit, static_asserts them against nccl.h where it is installed.

#include <cstddef>
#include <string>

// nccl.h: typedef struct ncclComm* ncclComm_t. The same incomplete struct, so a comm handle here is
// an ncclComm_t there.
struct ncclComm;  // NOLINT(readability-identifier-naming): NCCL's own name

namespace zoe::engine::detail::nccl {

using comm_t = ncclComm*;

/// NCCL_UNIQUE_ID_BYTES in nccl.h.
inline constexpr std::size_t unique_id_bytes = 128;
/// ncclUniqueId: the opaque bytes rank 0 makes and every rank of a new communicator is handed.
struct unique_id {
  char internal[unique_id_bytes];
};

/// ncclResult_t (nccl.h: ncclSuccess 0 ... ncclInProgress 7).
enum class result : int {
  success = 0,
  unhandled_cuda_error = 1,
  system_error = 2,
  internal_error = 3,
  invalid_argument = 4,
  invalid_usage = 5,
  remote_error = 6,
  in_progress = 7
};

/// The ncclDataType_t values zoe sends (nccl.h: ncclUint8 1, ncclFloat16 6, ncclFloat32 7,
/// ncclBfloat16 9).
enum class data_type : int { uint8 = 1, float16 = 6, float32 = 7, bfloat16 = 9 };

/// The ncclRedOp_t values zoe reduces with (nccl.h: ncclSum 0, ncclAvg 4).
enum class red_op : int { sum = 0, avg = 4 };

/// nccl.h's NCCL_SPLIT_NOCOLOR: the colour of a rank that joins no group of an ncclCommSplit.
inline constexpr int split_nocolor = -1;

/// The entry points, with nccl.h's signatures (a cudaStream_t crosses as void*, an ncclConfig_t*
/// as void*: zoe passes nullptr, NCCL's defaults).
struct api {
  result (*get_version)(int* version) = nullptr;
  const char* (*get_error_string)(result r) = nullptr;
  result (*get_unique_id)(unique_id* id) = nullptr;
  result (*comm_init_rank)(comm_t* comm, int nranks, unique_id id, int rank) = nullptr;
  /// ncclCommSplit (NCCL 2.18 and later); nullptr where the library lacks it.
  result (*comm_split)(comm_t comm, int color, int key, comm_t* newcomm, void* config) = nullptr;
  result (*comm_destroy)(comm_t comm) = nullptr;
  result (*comm_abort)(comm_t comm) = nullptr;
  result (*comm_get_async_error)(comm_t comm, result* async_error) = nullptr;
  result (*all_gather)(const void* send, void* recv, std::size_t send_count, data_type type, comm_t comm,
                       void* stream) = nullptr;
  result (*reduce_scatter)(const void* send, void* recv, std::size_t recv_count, data_type type, red_op op, comm_t comm,
                           void* stream) = nullptr;
  result (*all_reduce)(const void* send, void* recv, std::size_t count, data_type type, red_op op, comm_t comm,
                       void* stream) = nullptr;
  result (*broadcast)(const void* send, void* recv, std::size_t count, data_type type, int root, comm_t comm,
                      void* stream) = nullptr;
  result (*send)(const void* send, std::size_t count, data_type type, int peer, comm_t comm, void* stream) = nullptr;
  result (*recv)(void* recv, std::size_t count, data_type type, int peer, comm_t comm, void* stream) = nullptr;
  result (*group_start)() = nullptr;
  result (*group_end)() = nullptr;
};

/// The oldest NCCL the backend runs on: 2.10 brought ncclAvg and ncclBfloat16 (version code
/// major * 10000 + minor * 100 + patch, as ncclGetVersion reports it since 2.9).
inline constexpr int min_version = 21000;

/// The library a process loaded. Never unloaded: NCCL leaves threads and handlers behind that point
/// into it, so the handle lives until the process exits. Copyable (it only holds the resolved
/// pointers); immutable, so any thread may use it.
class library {
 public:
  /// The name zoe asks the dynamic loader for (found through its usual search path).
  static constexpr const char* default_path = "libnccl.so.2";

  /// Loads `path` (a bare name goes through the loader's search path) and resolves every entry
  /// point of api. Throws config_error naming zoe.comm.backend and the library: when it does not
  /// load (with the loader's reason), when it lacks a symbol (naming each missing one), or when
  /// it is older than min_version (naming both versions).
  [[nodiscard]] static library load(const std::string& path = default_path);

  [[nodiscard]] const api& entry() const noexcept { return api_; }
  /// The path it was loaded from, as given to load().
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// ncclGetVersion's code (e.g. 22809 for 2.28.9).
  [[nodiscard]] int version() const noexcept { return version_; }
  /// "2.28.9". Throws only std::bad_alloc.
  [[nodiscard]] std::string version_string() const;
  /// Whether the library has ncclCommSplit (else sub-groups get unique ids of their own).
  [[nodiscard]] bool has_split() const noexcept { return api_.comm_split != nullptr; }
  /// ncclGetErrorString's text for `r` ("unknown NCCL result N" if it returns null). Never throws
  /// but std::bad_alloc.
  [[nodiscard]] std::string error_string(result r) const;

 private:
  library() = default;
  api api_;
  std::string path_;
  int version_ = 0;
};

/// The library at library::default_path, loaded once for the process on first use (a failed load
/// is retried on the next call, and throws as library::load does). Thread-safe.
[[nodiscard]] const library& process_library();

}  // namespace zoe::engine::detail::nccl
