/* A stand-in for libnccl.so.2 for nccl_library_test: NCCL's entry points by name, doing nothing.
 * Built as shared modules that each leave something out, so the loader's refusals can be tested:
 *   ZOE_NCCL_STUB_WITHOUT_SEND   ncclSend is missing (the loader names it)
 *   ZOE_NCCL_STUB_VERSION        the code ncclGetVersion reports (an old one is refused)
 * ncclCommSplit is never defined: it is optional, and the loader must not miss it. The names are
 * NCCL's, hence the NOLINTs; the signatures are loose (nothing calls them but ncclGetVersion and
 * ncclGetErrorString). */
#ifndef ZOE_NCCL_STUB_VERSION
#define ZOE_NCCL_STUB_VERSION 22809
#endif

int ncclGetVersion(int* version) { /* NOLINT(readability-identifier-naming) */
  *version = ZOE_NCCL_STUB_VERSION;
  return 0;
}
const char* ncclGetErrorString(int result) { /* NOLINT(readability-identifier-naming) */
  return result == 0 ? "no error" : "stub error";
}
int ncclGetUniqueId(void) { return 0; }       /* NOLINT(readability-identifier-naming) */
int ncclCommInitRank(void) { return 0; }      /* NOLINT(readability-identifier-naming) */
int ncclCommDestroy(void) { return 0; }       /* NOLINT(readability-identifier-naming) */
int ncclCommAbort(void) { return 0; }         /* NOLINT(readability-identifier-naming) */
int ncclCommGetAsyncError(void) { return 0; } /* NOLINT(readability-identifier-naming) */
int ncclAllGather(void) { return 0; }         /* NOLINT(readability-identifier-naming) */
int ncclReduceScatter(void) { return 0; }     /* NOLINT(readability-identifier-naming) */
int ncclAllReduce(void) { return 0; }         /* NOLINT(readability-identifier-naming) */
int ncclBroadcast(void) { return 0; }         /* NOLINT(readability-identifier-naming) */
#ifndef ZOE_NCCL_STUB_WITHOUT_SEND
int ncclSend(void) { return 0; } /* NOLINT(readability-identifier-naming) */
#endif
int ncclRecv(void) { return 0; }       /* NOLINT(readability-identifier-naming) */
int ncclGroupStart(void) { return 0; } /* NOLINT(readability-identifier-naming) */
int ncclGroupEnd(void) { return 0; }   /* NOLINT(readability-identifier-naming) */
