// Loads NCCL with dlopen and resolves the backend's entry points by name (see nccl_library.hpp).
#include "nccl_library.hpp"

#include <dlfcn.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail::nccl {
namespace {

constexpr const char* backend_key = "zoe.comm.backend";

// dlsym hands back an object pointer; POSIX guarantees it converts to the function's type.
template <typename Fn>
void resolve(void* handle, const char* symbol, Fn*& out, std::vector<std::string>* missing) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr && missing != nullptr) missing->emplace_back(symbol);
  out = reinterpret_cast<Fn*>(address);
}

}  // namespace

library library::load(const std::string& path) {
  // RTLD_LOCAL: NCCL's symbols stay out of the global namespace, so a second NCCL loaded by the
  // application (PyTorch's, say) cannot be bound in its place or the other way round.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    throw config_error(str(backend_key, ": nccl: cannot load ", path, ": ",
                           reason != nullptr ? reason : "no reason given",
                           " (install NCCL 2.10 or later where the dynamic loader finds it, e.g. on LD_LIBRARY_PATH, "
                           "or choose another backend)"));
  }

  library lib;
  lib.path_ = path;
  api& a = lib.api_;
  std::vector<std::string> missing;
  resolve(handle, "ncclGetVersion", a.get_version, &missing);
  resolve(handle, "ncclGetErrorString", a.get_error_string, &missing);
  resolve(handle, "ncclGetUniqueId", a.get_unique_id, &missing);
  resolve(handle, "ncclCommInitRank", a.comm_init_rank, &missing);
  resolve(handle, "ncclCommSplit", a.comm_split, nullptr);  // optional: NCCL 2.18 and later
  resolve(handle, "ncclCommDestroy", a.comm_destroy, &missing);
  resolve(handle, "ncclCommAbort", a.comm_abort, &missing);
  resolve(handle, "ncclCommGetAsyncError", a.comm_get_async_error, &missing);
  resolve(handle, "ncclAllGather", a.all_gather, &missing);
  resolve(handle, "ncclReduceScatter", a.reduce_scatter, &missing);
  resolve(handle, "ncclAllReduce", a.all_reduce, &missing);
  resolve(handle, "ncclBroadcast", a.broadcast, &missing);
  resolve(handle, "ncclSend", a.send, &missing);
  resolve(handle, "ncclRecv", a.recv, &missing);
  resolve(handle, "ncclGroupStart", a.group_start, &missing);
  resolve(handle, "ncclGroupEnd", a.group_end, &missing);
  // The handle stays open even on failure: dlclose of a library whose initializers ran may leave
  // handlers pointing into unmapped code, and a failed load is rare and fatal to the backend.
  if (!missing.empty()) {
    std::string names;
    for (const std::string& name : missing) names += (names.empty() ? "" : ", ") + name;
    throw config_error(str(backend_key, ": nccl: ", path, " lacks the symbol", missing.size() == 1 ? " " : "s ", names,
                           " that zoe needs (is it NCCL 2.10 or later?)"));
  }

  const result r = a.get_version(&lib.version_);
  if (r != result::success) {
    throw config_error(str(backend_key, ": nccl: ncclGetVersion of ", path, " failed: ", lib.error_string(r)));
  }
  if (lib.version_ < min_version) {
    throw config_error(str(backend_key, ": nccl: ", path, " is NCCL ", lib.version_string(),
                           "; zoe needs 2.10 or later (ncclAvg, ncclBfloat16)"));
  }
  return lib;
}

std::string library::version_string() const {
  // Codes from 2.9 on are major * 10000 + minor * 100 + patch; older ones major * 1000 + minor * 100
  // + patch (nccl.h's NCCL_VERSION).
  const int v = version_;
  if (v >= 10000) return str(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
  return str(v / 1000, ".", (v % 1000) / 100, ".", v % 100);
}

std::string library::error_string(result r) const {
  const char* text = api_.get_error_string != nullptr ? api_.get_error_string(r) : nullptr;
  if (text == nullptr) return str("unknown NCCL result ", static_cast<int>(r));
  return str(text, " (NCCL result ", static_cast<int>(r), ")");
}

const library& process_library() {
  static std::mutex mutex;
  static std::optional<library> loaded;
  const std::lock_guard lock(mutex);
  if (!loaded) loaded.emplace(library::load());
  return *loaded;
}

}  // namespace zoe::engine::detail::nccl
