/* zoe.h: the C API of zoe, the ZeRO Offload Engine.
 *
 * Train a model whose states do not fit in device memory: zoe keeps every parameter's working copy,
 * gradient, fp32 master and Adam moments in device memory, pinned host memory or on NVMe (as a
 * DeepSpeed-style JSON configuration places them), and hands the caller device pointers to compute
 * with. One training step of `gradient_accumulation_steps` micro-batches looks like:
 *
 *   for each micro-batch:
 *     zoe_begin_micro_batch(e)
 *     forward, module by module:
 *       zoe_fetch(e, m, ZOE_PASS_FORWARD, s)      -> compute with zoe_parameter_address() on s
 *       zoe_activation_save(e, act, bytes, s, &a)  (optional: keep an activation until backward)
 *       zoe_release(e, m, s)
 *     backward, modules in reverse:
 *       zoe_fetch(e, m, ZOE_PASS_BACKWARD, s)
 *       zoe_activation_load(e, a, s, &act)         (brings it back; the ones before it prefetch)
 *       zoe_module_gradients(e, m, s, bufs, n)     -> write d(loss * loss_scale)/d(param) into bufs
 *       zoe_reduce_gradients(e, m, s)              (hands them in)
 *       zoe_activation_free(e, a, s)
 *       zoe_release(e, m, s)
 *     zoe_end_micro_batch(e)
 *   zoe_step(e, lr, &result)                       (result.loss_scale: the next step's loss scale)
 *
 * Conventions (as NCCL's API):
 *   - Every call returns a zoe_status. On failure the calling thread's zoe_last_error() says what
 *     went wrong and names the object (the config key, the path and offset, the module, the size).
 *     No C++ exception crosses this boundary.
 *   - Out-parameters come last; every pointer is checked (NULL where one is required is
 *     ZOE_ERROR_USAGE, and nothing is written to the out-parameters of a failed call).
 *   - Handles are opaque and come in create/destroy pairs. A handle passed after its destroy (or
 *     one zoe never made) is ZOE_ERROR_USAGE, never a crash: zoe keeps a registry of live handles.
 *   - Structs begin with their own size (`struct_size`, set it with the ZOE_..._INIT macros) so that
 *     later versions can add fields at the end without breaking callers built against this one.
 *   - Thread-safety is stated per call. "One thread" means: calls on one engine that say so must
 *     not run concurrently with each other or with any other call on that engine.
 *   - Streams: work zoe queues for a call on a stream `s` runs in order with the caller's work on s.
 *     A NULL stream is the device's default stream.
 */
#ifndef ZOE_ZOE_H
#define ZOE_ZOE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define ZOE_API __attribute__((visibility("default")))
#else
#define ZOE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The C API's names follow C's conventions (upper-case constants), not zoe's C++ naming. */
/* NOLINTBEGIN(readability-identifier-naming) */

/* ---- status and errors ----------------------------------------------------------------------- */

/** Every call's result. The values are stable (zoe::error_category's). */
typedef enum zoe_status {
  ZOE_SUCCESS = 0,
  ZOE_ERROR_INTERNAL = 1, /**< a bug in zoe: an invariant did not hold */
  ZOE_ERROR_USAGE = 2,    /**< a bad argument, handle, size or dtype, or a call out of order */
  ZOE_ERROR_CONFIG = 3,   /**< a configuration key has a wrong type, value or combination */
  ZOE_ERROR_IO = 4,       /**< a file operation failed (the message names the path and offset) */
  ZOE_ERROR_CORRUPT = 5,  /**< stored data (swap file, checkpoint) failed its integrity check */
  ZOE_ERROR_MEMORY = 6,   /**< out of memory in some tier (device budget, pinned host, arena) */
  ZOE_ERROR_DEVICE = 7,   /**< the compute device failed */
  ZOE_ERROR_COMM = 8,     /**< a collective failed */
  ZOE_ERROR_TIMEOUT = 9   /**< a bounded wait ran out */
} zoe_status;

/** "success", "usage", "config", ... for a status; "unknown" for a value not listed. Thread-safe. */
ZOE_API const char* zoe_status_string(zoe_status status);

/** The message of the calling thread's last failed call ("" when none failed yet). The string is
 *  valid until the thread's next failing call. Thread-safe (thread-local). */
ZOE_API const char* zoe_last_error(void);

/** The library's version as "major.minor.patch". Thread-safe. */
ZOE_API const char* zoe_version(void);

/* ---- devices, streams and device memory -------------------------------------------------------- */

typedef struct zoe_device zoe_device;
typedef struct zoe_stream zoe_stream;

typedef enum zoe_device_kind {
  ZOE_DEVICE_AUTO = 0, /**< CUDA when a usable GPU is present, else the host device */
  ZOE_DEVICE_HOST = 1, /**< the host-emulated device: host memory with a hard budget */
  ZOE_DEVICE_CUDA = 2
} zoe_device_kind;

typedef struct zoe_device_options {
  size_t struct_size;    /**< sizeof(zoe_device_options) */
  zoe_device_kind kind;  /**< ZOE_DEVICE_AUTO honours the environment variable ZOE_DEVICE */
  uint64_t budget_bytes; /**< the host device's budget; 0: ZOE_DEVICE_BUDGET, else half of memory */
  int cuda_ordinal;
} zoe_device_options;
#define ZOE_DEVICE_OPTIONS_INIT \
  { sizeof(zoe_device_options), ZOE_DEVICE_AUTO, 0, 0 }

/** Opens a device. ZOE_ERROR_CONFIG for an unknown kind, ZOE_ERROR_DEVICE when CUDA is asked for
 *  and unusable. Thread-safe. */
ZOE_API zoe_status zoe_device_create(const zoe_device_options* options, zoe_device** device);
/** Closes a device made by zoe_device_create. Every engine and stream using it must be destroyed
 *  first (ZOE_ERROR_USAGE naming their count otherwise, and the device stays open); one still being
 *  made by zoe_engine_create or zoe_stream_create on another thread counts as using it, as does a
 *  call on the device (allocate, free, copy, memory, kind) in progress there. Thread-safe. */
ZOE_API zoe_status zoe_device_destroy(zoe_device* device);
/** The device's kind (ZOE_DEVICE_HOST or ZOE_DEVICE_CUDA). Thread-safe. */
ZOE_API zoe_status zoe_device_get_kind(const zoe_device* device, zoe_device_kind* kind);
/** Device memory in use now, the most ever in use, and the budget, in bytes. Thread-safe. */
ZOE_API zoe_status zoe_device_memory(const zoe_device* device, uint64_t* current_bytes, uint64_t* peak_bytes,
                                     uint64_t* budget_bytes);

/** A new stream of `device`. Thread-safe. */
ZOE_API zoe_status zoe_stream_create(zoe_device* device, zoe_stream** stream);
/** Waits for the work queued on the stream, then destroys it. Thread-safe (not concurrently with
 *  other calls using this stream). */
ZOE_API zoe_status zoe_stream_destroy(zoe_stream* stream);
/** Blocks until the work queued on `stream` has completed; returns the failure of that work.
 *  Thread-safe. */
ZOE_API zoe_status zoe_stream_synchronize(zoe_stream* stream);
/** The native handle: the cudaStream_t on a CUDA device (for cuBLAS and kernels), NULL on the host
 *  device (whose memory is host memory: synchronize the stream, then compute on the host).
 *  Thread-safe. */
ZOE_API zoe_status zoe_stream_native(const zoe_stream* stream, void** native);

/** `bytes` (> 0) of device memory (counted against the budget), usable by work on `stream`.
 *  ZOE_ERROR_MEMORY naming the size, the usage and the budget when it does not fit. Thread-safe. */
ZOE_API zoe_status zoe_device_allocate(zoe_device* device, size_t bytes, zoe_stream* stream, void** pointer);
/** Frees memory from zoe_device_allocate (`bytes` as allocated) after the work on `stream`; a NULL
 *  pointer is ignored. ZOE_ERROR_USAGE, freeing nothing, for a pointer this device's
 *  zoe_device_allocate did not return, one freed already, or a size other than the one allocated.
 *  Thread-safe. */
ZOE_API zoe_status zoe_device_free(zoe_device* device, void* pointer, size_t bytes, zoe_stream* stream);

typedef enum zoe_copy_kind {
  ZOE_COPY_HOST_TO_DEVICE = 0,
  ZOE_COPY_DEVICE_TO_HOST = 1,
  ZOE_COPY_DEVICE_TO_DEVICE = 2
} zoe_copy_kind;
/** Copies `bytes` from `src` to `dst` in order with the work on `stream`. Thread-safe. */
ZOE_API zoe_status zoe_copy_async(zoe_device* device, void* dst, const void* src, size_t bytes, zoe_copy_kind kind,
                                  zoe_stream* stream);

/* ---- the model --------------------------------------------------------------------------------- */

typedef struct zoe_model zoe_model;
typedef uint32_t zoe_module_id;
typedef uint32_t zoe_parameter_id;

typedef enum zoe_dtype { ZOE_FP32 = 0, ZOE_FP16 = 1, ZOE_BF16 = 2 } zoe_dtype;

typedef enum zoe_init {
  ZOE_INIT_DATA = 0, /**< `data` holds numel fp32 values, row-major (read by zoe_engine_create) */
  ZOE_INIT_ZEROS = 1,
  ZOE_INIT_UNIFORM = 2, /**< uniform in [-scale, scale) */
  ZOE_INIT_NORMAL = 3   /**< normal with mean 0 and standard deviation `scale` */
} zoe_init;

/** One parameter. The seeded initializers give the same values for the same (seed, shape) on every
 *  machine, whatever the thread count or the configuration. */
typedef struct zoe_parameter_desc {
  size_t struct_size;    /**< sizeof(zoe_parameter_desc) */
  const char* name;      /**< unique in the model; copied */
  size_t ndim;           /**< 0: a scalar; at most 64 */
  const uint64_t* shape; /**< ndim extents, each > 0; copied */
  zoe_dtype dtype;       /**< the working copy's type (ZOE_FP32: the fp32 master is the working copy) */
  zoe_init init;
  const float* data; /**< ZOE_INIT_DATA: numel values, kept by the caller until zoe_engine_create returns */
  float scale;       /**< ZOE_INIT_UNIFORM / ZOE_INIT_NORMAL */
  uint64_t seed;     /**< ZOE_INIT_UNIFORM / ZOE_INIT_NORMAL */
  /** 1: the parameter is frozen (PyTorch's requires_grad=False). It has no gradient, no Adam
   *  moments and no fp32 master beyond its working copy (an fp32 one is its own value; a 16-bit one
   *  keeps only its 16-bit value, the initial values rounded to it), takes no part in the gradient
   *  norm, clipping or the step, and costs nothing in the footprint plan's gradient and optimizer
   *  items. zoe_module_gradients gives NULL for its buffer. 0 (the default): trainable. A caller
   *  built before this field (a smaller struct_size) gets 0. */
  int frozen;
  /** The parameter group whose learning rate and weight decay zoe_step_groups applies to it
   *  (PyTorch's optimizer param_groups): 0 by default (and for a caller built before this field),
   *  at most ZOE_MAX_PARAMETER_GROUP (ZOE_ERROR_USAGE naming the parameter and the bound above it).
   *  The model has max(group) + 1 groups; a group with no parameter is allowed. A frozen parameter's
   *  group counts towards the number but is never stepped. */
  uint32_t group;
} zoe_parameter_desc;
/** The largest zoe_parameter_desc.group: the engine keeps settings for every group up to the
 *  largest, and zoe_step_groups takes that many, so a stray value (a parameter id passed for a
 *  group) is refused rather than costing memory; far beyond any optimizer's param_groups. */
#define ZOE_MAX_PARAMETER_GROUP 65535u
#define ZOE_PARAMETER_DESC_INIT \
  { sizeof(zoe_parameter_desc), NULL, 0, NULL, ZOE_FP32, ZOE_INIT_ZEROS, NULL, 0.0f, 0, 0, 0 }

/** Writes elements [first, first + count) of the values the seeded initializer `init`
 *  (ZOE_INIT_ZEROS, ZOE_INIT_UNIFORM or ZOE_INIT_NORMAL) gives a parameter with this `scale` and
 *  `seed`: element i depends only on (init, scale, seed, i), so a reference implementation can
 *  reproduce zoe's initial values piece by piece. With r(k) the k-th output of splitmix64 seeded
 *  with `seed` and u(k) = (r(k) >> 11) * 2^-53, in double: uniform is scale * (2 u(i) - 1), normal
 *  is scale * sqrt(-2 ln(1 - u(2i))) * cos(2 pi u(2i+1)), each rounded to float. ZOE_ERROR_USAGE
 *  for ZOE_INIT_DATA, an unknown initializer, a scale that is not finite and >= 0, or first + count
 *  past 2^64 - 1. Thread-safe. */
ZOE_API zoe_status zoe_initializer_fill(zoe_init init, float scale, uint64_t seed, uint64_t first, float* values,
                                        size_t count);

/** An empty model to register modules and parameters in. One thread per model. */
ZOE_API zoe_status zoe_model_create(zoe_model** model);
ZOE_API zoe_status zoe_model_destroy(zoe_model* model);
/** Adds a module (the unit of fetch and release); ids count from 0 in the order added. `name` is
 *  copied and must be unique (ZOE_ERROR_USAGE naming it otherwise). */
ZOE_API zoe_status zoe_model_add_module(zoe_model* model, const char* name, zoe_module_id* module);
/** Adds a parameter to `module`; ids count from 0 over the whole model in the order added.
 *  ZOE_ERROR_USAGE naming the parameter for an unknown module, a duplicate name, a zero extent, an
 *  element count past 64 bits, more than 64 extents, an unknown dtype or initializer, ZOE_INIT_DATA
 *  without data. */
ZOE_API zoe_status zoe_model_add_parameter(zoe_model* model, zoe_module_id module, const zoe_parameter_desc* desc,
                                           zoe_parameter_id* parameter);

/* ---- collectives supplied by the host program -------------------------------------------------- */

/** How a reduction combines the ranks' elements. */
typedef enum zoe_reduce_op {
  ZOE_REDUCE_SUM = 0,
  ZOE_REDUCE_MEAN = 1 /**< the sum divided by the group's size */
} zoe_reduce_op;

/** The capacity of the `message` buffer zoe hands every zoe_host_comm callback. */
#define ZOE_HOST_COMM_MESSAGE_CAPACITY 1024

/** A host program's collectives (torch.distributed under torchrun, say), which zoe runs its own
 *  over instead of MPI or NCCL: zoe_engine_desc.host_comm.
 *
 *  Groups. For each world it makes (zoe_engine_create makes three: the caller's world of
 *  zoe_all_reduce_sum, the parameter gathers', the gradient reductions'), zoe asks for the world
 *  group, then for each group of every sub-group kind it uses (node-local: the ranks of one node;
 *  cross-node: the ranks of one local rank on every node; hpZ: zero_hpz_partition_size consecutive
 *  ranks), node by node, skipping a kind whose groups are the whole world, single ranks, or those
 *  of a kind already asked for. It asks on EVERY rank for EVERY group, members or not, in the same
 *  order (torch.distributed.new_group is collective over the whole world), on the thread calling
 *  zoe_engine_create. A world of one rank asks for nothing and calls nothing. Ranks: world ranks
 *  0 .. world_size - 1 (torch's global ranks); inside a group, rank i is world_ranks[i] (ascending),
 *  and `root`, `from` and `to` count in the group.
 *
 *  Collectives. Buffers are device memory of the engine's device (host memory on the host device).
 *  `count` counts elements of `dtype`; `bytes` counts bytes. A group of `n` ranks, this one `r`:
 *    all_gather      every rank gives `bytes` at `send`; recv (n * bytes) gets them in rank order;
 *                    send may be recv + r * bytes (in place)
 *    reduce_scatter  send holds n blocks of `count`; recv gets the reduction of every rank's block r;
 *                    recv may be send + r * count elements (in place)
 *    all_reduce      recv gets the reduction of every rank's `count` at send; send may be recv
 *    all_to_all      send holds n blocks of `bytes`, block d for rank d; recv gets block r of every
 *                    rank in rank order; never in place
 *    broadcast       `bytes` at `buffer` on rank `root` overwrite `buffer` on every other rank
 *    point_to_point  `bytes` at `buffer` on rank `from` overwrite `buffer` on rank `to`; zoe calls it
 *                    on those two ranks alone (from != to), with the same arguments on both
 *    barrier         returns once every rank of the group called it
 *  zoe packs the parts of its coalesced all-gathers (and of its coalesced reduce-scatters of one
 *  dtype) into one call on the host device, the bytes between ranks the same; on CUDA it calls once
 *  per part (packing would take device memory the footprint plan does not hold).
 *  Reduction order: the host's own, as NCCL's is, so results are bit-identical to zoe's mpi backend
 *  (its pairwise tree) only where the host's order gives the same sums; with two ranks any order
 *  does (a + b is b + a). fp16 and bf16 are reduced as the host reduces them.
 *
 *  Threads and streams. On the host device (native_stream NULL) zoe calls a collective on the
 *  worker thread of the stream it was issued on, in stream order, and the call must finish the
 *  collective before it returns. On a CUDA device zoe calls it on the thread that issues it, when it
 *  is issued, with native_stream the cudaStream_t the work must be ordered on: the host makes that
 *  stream wait for the collective (torch: run it under torch.cuda.ExternalStream(native_stream))
 *  and may return before it completes. Either way zoe makes one call at a time per group, in the
 *  order zoe issued them, the same on every rank; calls on different groups may run concurrently on
 *  different threads. barrier, create_group and destroy_group are called on the calling thread of
 *  the zoe call that needs them. A callback must not call into zoe (zoe_* functions), and must not
 *  wait on the engine's streams.
 *
 *  Failures. Every callback returns ZOE_SUCCESS, or a status (ZOE_ERROR_COMM, ZOE_ERROR_TIMEOUT,
 *  ...) with a NUL-terminated message written into `message` (ZOE_HOST_COMM_MESSAGE_CAPACITY bytes,
 *  zeroed; longer text is cut). zoe fails the collective with that status, its message naming the
 *  collective, the group and the rank ("all_gather on host (world) (world rank 1): <message>"),
 *  reported where a collective's failure is (the stream's next synchronize on the host device, the
 *  call itself on CUDA), and refuses the group's later collectives. zoe.comm.timeout_s does not
 *  apply: a rank that never arrives is the host's to time out (torch: init_process_group's
 *  timeout). When zoe drops a collective its peers will issue, it refuses its own later ones at
 *  once; the peers learn of it through the host's timeout. A failed destroy_group is logged.
 *
 *  All callbacks are required (ZOE_ERROR_USAGE naming the first missing one). */
typedef struct zoe_host_comm {
  size_t struct_size;      /**< sizeof(zoe_host_comm) */
  void* user;              /**< passed to every callback */
  uint32_t rank;           /**< this process's world rank, < world_size */
  uint32_t world_size;     /**< > 0 */
  uint32_t ranks_per_node; /**< 0: world_size (one node); else divides world_size (zoe.ranks_per_node, when set,
                                takes its place) */
  /** Makes the group of `count` world ranks `world_ranks` (ascending) and sets *group to the handle
   *  zoe passes to the group's collectives; on a rank outside it, to anything (zoe only passes it
   *  back to destroy_group). */
  zoe_status (*create_group)(void* user, const uint32_t* world_ranks, size_t count, void** group, char* message,
                             size_t message_capacity);
  /** Ends a group create_group made (each once, members' and others' alike, when its world is
   *  destroyed: on the thread calling zoe_engine_destroy, or zoe_engine_create when it fails). */
  zoe_status (*destroy_group)(void* user, void* group, char* message, size_t message_capacity);
  zoe_status (*all_gather)(void* user, void* group, const void* send, void* recv, size_t bytes, void* native_stream,
                           char* message, size_t message_capacity);
  zoe_status (*reduce_scatter)(void* user, void* group, const void* send, void* recv, size_t count, zoe_dtype dtype,
                               zoe_reduce_op op, void* native_stream, char* message, size_t message_capacity);
  zoe_status (*all_reduce)(void* user, void* group, const void* send, void* recv, size_t count, zoe_dtype dtype,
                           zoe_reduce_op op, void* native_stream, char* message, size_t message_capacity);
  zoe_status (*all_to_all)(void* user, void* group, const void* send, void* recv, size_t bytes, void* native_stream,
                           char* message, size_t message_capacity);
  zoe_status (*broadcast)(void* user, void* group, void* buffer, size_t bytes, uint32_t root, void* native_stream,
                          char* message, size_t message_capacity);
  zoe_status (*point_to_point)(void* user, void* group, void* buffer, size_t bytes, uint32_t from, uint32_t to,
                               void* native_stream, char* message, size_t message_capacity);
  zoe_status (*barrier)(void* user, void* group, char* message, size_t message_capacity);
} zoe_host_comm;
#define ZOE_HOST_COMM_INIT \
  { sizeof(zoe_host_comm), NULL, 0, 1, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL }

/* ---- the engine -------------------------------------------------------------------------------- */

typedef struct zoe_engine zoe_engine;

typedef struct zoe_engine_desc {
  size_t struct_size;      /**< sizeof(zoe_engine_desc) */
  const char* config_json; /**< a DeepSpeed-style JSON document, or NULL ... */
  const char* config_path; /**< ... a file holding one (exactly one of the two; "{}" for defaults) */
  const zoe_model* model;  /**< read during the call; may be destroyed afterwards */
  zoe_device* device;      /**< NULL: the engine opens the device the config's zoe.device names */
  /** NULL, or a JSON object merged over the configuration before it is read, as an RFC 7386 merge
   *  patch (objects merge key by key, any other value replaces, null removes): a launcher's
   *  settings (zoe.ranks_per_node, ...) over a shared configuration file. Read as strictly as the
   *  configuration; its errors start "zoe_engine_desc.config_overrides" (with line and column). */
  const char* config_overrides;
  /** NULL: the ranks talk through zoe.comm.backend (mpi, nccl, single). Non-NULL: through the host
   *  program's collectives (see zoe_host_comm; the backend is "host", and a zoe.comm.backend other
   *  than "auto" or "host" is ZOE_ERROR_CONFIG naming it). Copied; `user` must stay valid until
   *  zoe_engine_destroy returns. */
  const zoe_host_comm* host_comm;
} zoe_engine_desc;
#define ZOE_ENGINE_DESC_INIT \
  { sizeof(zoe_engine_desc), NULL, NULL, NULL, NULL, NULL, NULL }

/** Parses the configuration (with config_overrides merged over it), lays the model out, plans its
 *  footprint (checked against this machine before anything is allocated), builds every stage and
 *  gives each parameter its initial value. ZOE_ERROR_CONFIG naming the key, ZOE_ERROR_MEMORY naming
 *  the plan item, ZOE_ERROR_IO naming the swap path. Config warnings (unknown keys) go to zoe's log.
 *  Several ranks (a launch by mpirun, zoe.comm.backend; or desc->host_comm, whose create_group it
 *  calls for each group on this thread): collective, every rank calls it with the same model and
 *  configuration. What each rank holds follows zero_optimization.stage, as in
 *  DeepSpeed: stage 3 1/world_size of every state; stages 1 and 2 the 16-bit parameters whole,
 *  1/world_size of the optimizer states, and the gradients whole through the step (stage 1) or
 *  1/world_size (stage 2); stage 0 a whole replica of every state, its gradients all-reduced.
 *  Thread-safe. */
ZOE_API zoe_status zoe_engine_create(const zoe_engine_desc* desc, zoe_engine** engine);
/** Waits for the engine's work, frees every tier's memory and removes its swap files.
 *  ZOE_ERROR_USAGE while streams of a device the engine opened itself (zoe_engine_device) are
 *  alive: destroy them first. Several ranks: collective, every rank destroys its engine. Not
 *  concurrently with any other call on this engine. */
ZOE_API zoe_status zoe_engine_destroy(zoe_engine* engine);
/** The device the engine runs on (borrowed: valid until zoe_engine_destroy). Thread-safe. */
ZOE_API zoe_status zoe_engine_device(zoe_engine* engine, zoe_device** device);

/** The engine's batch sizes, DeepSpeed's train_batch_size = train_micro_batch_size_per_gpu x
 *  gradient_accumulation_steps x world size: the configuration's keys with the one not written
 *  derived for the engine's world size, as DeepSpeed derives it (zoe_engine_create refuses, with
 *  ZOE_ERROR_CONFIG naming the keys and values, three that do not multiply out or a derived 0;
 *  engine/CONFIG.md). With neither batch size written, train_batch_size and
 *  train_micro_batch_size_per_gpu are 0 (unknown) and gradient_accumulation_steps is as written, or 1. */
typedef struct zoe_batch_sizes {
  size_t struct_size; /**< sizeof(zoe_batch_sizes), set by the caller */
  uint64_t train_batch_size;
  uint64_t train_micro_batch_size_per_gpu;
  uint64_t gradient_accumulation_steps; /**< the micro-batches of one step (>= 1) */
} zoe_batch_sizes;
#define ZOE_BATCH_SIZES_INIT \
  { sizeof(zoe_batch_sizes), 0, 0, 1 }
/** Writes the engine's batch sizes (above) into *sizes. Thread-safe. */
ZOE_API zoe_status zoe_engine_batch_sizes(const zoe_engine* engine, zoe_batch_sizes* sizes);

/* ---- the footprint plan ------------------------------------------------------------------------ */

/** What an engine of a model and a configuration needs, per rank, in bytes: the totals of zoe's
 *  footprint plan, as tools/zoe-plan prints them. zoe_engine_create refuses to start unless the
 *  device budget holds device_bytes, RLIMIT_MEMLOCK pinned_bytes, MemAvailable the host memory and
 *  the swap folders disk_bytes; a program asks before it picks its budget. */
typedef struct zoe_footprint {
  size_t struct_size;    /**< sizeof(zoe_footprint), set by the caller */
  uint64_t device_bytes; /**< device memory: the gathered-parameter arena, the gradient buckets, the states
                              placed on the device, ZeRO++'s secondary shards and scratch, the activations'
                              prefetch share (not the caller's own allocations, nor a loaded activation) */
  uint64_t pinned_bytes; /**< pinned host memory: states on pinned host, the swap and gradient staging
                              buffers, the activations' host share and NVMe staging */
  uint64_t host_bytes;   /**< pageable host memory: states on pageable host (pin_memory false), the
                              optimizer's undo log, stage 1's local gradients */
  uint64_t disk_bytes;   /**< the swap store over every nvme path (0 when nothing goes to NVMe) */
  /** Room the configuration gives activation checkpoints (zoe.activations, counted in the totals
   *  above): the pinned host share, the swap store bytes for those that overflow it (rounded to
   *  aio.block_size), and the device share for prefetched ones. With activation_host_bytes and
   *  activation_nvme_bytes both 0 (the default, as in any DeepSpeed file), zoe_activation_save has
   *  nowhere to keep an activation and fails with ZOE_ERROR_MEMORY: keep them yourself, or give
   *  the keys room. */
  uint64_t activation_host_bytes;
  uint64_t activation_nvme_bytes;
  uint64_t activation_prefetch_bytes;
} zoe_footprint;
#define ZOE_FOOTPRINT_INIT \
  { sizeof(zoe_footprint), 0, 0, 0, 0, 0, 0, 0 }

/** The footprint plan of the engine zoe_engine_create would make from `desc` (config_json or
 *  config_path, config_overrides merged over it, and the model; desc->device is not read) on each
 *  of `world_size` ranks (> 0: what a rank holds follows the stage, as zoe_engine_create says;
 *  ZeRO++'s hpZ needs it).
 *  Allocates, opens and checks nothing of this machine (no device, no swap file, no rank is
 *  contacted): the figures are what the engine would ask for, whether or not this machine has it.
 *  ZOE_ERROR_USAGE for a NULL or short struct, a dead model, world_size 0, or a model the layout
 *  refuses (naming the parameter); ZOE_ERROR_CONFIG naming the key for a configuration the engine
 *  would refuse (a bad value, batch sizes that do not multiply out for world_size, stage 0 with qgZ or an hpZ partition
 * on several ranks, nvme without a path); *footprint is written only on success. Not collective. Thread-safe (the model
 * must not change meanwhile: one thread per model).
 */
ZOE_API zoe_status zoe_footprint_plan(const zoe_engine_desc* desc, uint32_t world_size, zoe_footprint* footprint);

/* ---- ranks (data parallelism) ------------------------------------------------------------------ */

/** Where this process stands among the ranks of a data-parallel run. Ranks fill nodes in
 *  consecutive blocks: rank r is on node r / ranks_per_node with local rank r % ranks_per_node. */
typedef struct zoe_ranks {
  size_t struct_size;      /**< sizeof(zoe_ranks), set by the caller */
  uint32_t rank;           /**< 0 .. world_size - 1 */
  uint32_t world_size;     /**< the ranks training together (1 without a launcher) */
  uint32_t ranks_per_node; /**< ranks sharing a node (zoe.ranks_per_node, or MPI's shared-memory split) */
  uint32_t node;           /**< rank / ranks_per_node */
  uint32_t local_rank;     /**< rank % ranks_per_node */
  uint32_t nodes;          /**< world_size / ranks_per_node */
} zoe_ranks;
#define ZOE_RANKS_INIT \
  { sizeof(zoe_ranks), 0, 1, 1, 0, 0, 1 }

/** This process's rank and world size as its launcher announces them in the environment, before
 *  any engine is made: Open MPI's mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
 *  OMPI_COMM_WORLD_LOCAL_SIZE), else PMI (PMI_RANK, PMI_SIZE: MPICH's Hydra, Slurm); rank 0 of 1
 *  without either. ranks_per_node is the launcher's local size (world_size when it gives none), so
 *  node, local_rank and nodes follow from it; an engine's zoe.ranks_per_node may group them
 *  otherwise (zoe_engine_ranks is the engine's view). ZOE_ERROR_USAGE naming the variable when one
 *  is not a number, a size comes without its rank, or the rank is not below the size; also under a
 *  PMIx launcher that sets PMIX_RANK alone (it gives no size before MPI starts: ask
 *  zoe_engine_ranks). Reads the environment only: not collective.
 *  Thread-safe. */
ZOE_API zoe_status zoe_launcher_ranks(zoe_ranks* ranks);

/** The engine's rank, world size and nodes (its communicator's). Thread-safe. */
ZOE_API zoe_status zoe_engine_ranks(const zoe_engine* engine, zoe_ranks* ranks);

/** Sums `count` doubles over the ranks, in place: on return every rank holds the same sums, each
 *  added in zoe's pairwise tree over the ranks, ((r0 + r1) + (r2 + r3)) on 4 and ((r0 + r1) + r2)
 *  on 3 (level by level adjacent pairs, an odd one out carried up), the tree of the engine's
 *  gradient reductions on the mpi backend, so every rank's result is bit-identical whatever the
 *  timing, and values that are themselves tree sums of aligned halves or quarters of a whole add up
 *  to the whole's tree sum. Whatever the backend (also nccl: the values go by all-gather and are
 *  added on the host). For figures
 *  the caller computes on the host (a loss, a sample count), through a communicator of the engine
 *  kept for the caller alone, so it neither waits for nor reorders the engine's own collectives.
 *  Collective: every rank of the engine calls it, in the same order relative to its other calls of
 *  it, with the same count (ZOE_ERROR_USAGE on every rank naming the ranks' counts otherwise). A
 *  rank that never calls it makes the others fail with ZOE_ERROR_COMM or ZOE_ERROR_TIMEOUT naming
 *  it after zoe.comm.timeout_s. count 0 is a no-op (values may be NULL then). At world size 1 the
 *  values are left as they are. One thread (not concurrently with any other call on this engine). */
ZOE_API zoe_status zoe_all_reduce_sum(zoe_engine* engine, double* values, size_t count);

/** Bytes this rank has handed the transport in the engine's collectives since the engine was made
 *  (parameter gathers, gradient reductions, every group together), split by where they went: to
 *  ranks on this node or on other nodes. zoe_all_reduce_sum's own traffic is not counted. The mpi
 *  backend measures them at each send; nccl, whose transport is out of sight, counts by
 *  engine/comm/communicator.hpp's bytes_to rule; all 0 at world size 1. */
typedef struct zoe_comm_traffic {
  size_t struct_size;        /**< sizeof(zoe_comm_traffic), set by the caller */
  uint64_t intra_node_bytes; /**< sent to ranks on this node */
  uint64_t inter_node_bytes; /**< sent to ranks on other nodes */
  uint64_t collectives;      /**< collectives issued (world size 1 included) */
} zoe_comm_traffic;
#define ZOE_COMM_TRAFFIC_INIT \
  { sizeof(zoe_comm_traffic), 0, 0, 0 }

/** The engine's traffic so far (see zoe_comm_traffic); read it before and after a stretch of steps
 *  for theirs. Not collective. Thread-safe. */
ZOE_API zoe_status zoe_engine_traffic(zoe_engine* engine, zoe_comm_traffic* traffic);

/* ---- a micro-batch ----------------------------------------------------------------------------- */

typedef enum zoe_pass { ZOE_PASS_FORWARD = 0, ZOE_PASS_BACKWARD = 1 } zoe_pass;

/** Opens the next micro-batch. ZOE_ERROR_USAGE when one is open, the step's micro-batches are all
 *  done and zoe_step has not run, or an inference fetch (below) is not released yet (naming its
 *  module). One thread. */
ZOE_API zoe_status zoe_begin_micro_batch(zoe_engine* engine);
/** Closes it: every fetch released and every fetched-for-backward module's gradients reduced
 *  (ZOE_ERROR_USAGE naming the module otherwise; the micro-batch stays open). A module whose
 *  parameters are all frozen (zoe_parameter_desc.frozen) may be fetched for backward and released
 *  without zoe_module_gradients / zoe_reduce_gradients; a module with a trainable parameter may
 *  not. One thread. */
ZOE_API zoe_status zoe_end_micro_batch(zoe_engine* engine);

/** Brings module `module`'s parameters to the device for `pass`; work queued on `stream` after
 *  this call sees them (the call blocks only until the gathers are queued). ZOE_ERROR_USAGE for an
 *  unknown module, ZOE_PASS_BACKWARD outside a micro-batch, or when the module is fetched and not
 *  yet released; ZOE_ERROR_IO / ZOE_ERROR_CORRUPT naming the path and offset when its shard cannot
 *  be read.
 *  Inference: ZOE_PASS_FORWARD outside a micro-batch is an inference fetch (evaluation, generation
 *  between training steps): the same parameters, but no gradients (zoe_module_gradients refuses
 *  it), no micro-batch is opened or counted, and the training steps' prefetch trace neither learns
 *  its order nor is disturbed by it, so training around it runs as without it. zoe_release ends
 *  it. The rule is one: while any inference fetch is not released, every call that needs the
 *  engine between steps (zoe_begin_micro_batch, zoe_step, zoe_step_groups, zoe_read_state,
 *  zoe_write_state, the checkpoint calls, zoe_measure_stages) is ZOE_ERROR_USAGE naming its module.
 *  Inference fetches may come at any point outside a micro-batch (between two of one step, too);
 *  several may be open at once, of different modules. Several ranks: an inference fetch is
 *  collective like any fetch (every rank fetches the same modules in the same order).
 *  Thread-safe for different modules on one rank. With several ranks a fetch is collective (it
 *  gathers the module's shards from every rank): each rank must fetch the same modules in the same
 *  order, so drive fetches from one thread per rank (or order them yourself), or the ranks' gathers
 *  pair up wrongly and wait until zoe.comm.timeout_s. */
ZOE_API zoe_status zoe_fetch(zoe_engine* engine, zoe_module_id module, zoe_pass pass, zoe_stream* stream);
/** Ends the module's fetch (an inference fetch too) once the work queued on `stream` so far is
 *  done (an event recorded on it); its parameter pointers are invalid after this call.
 *  ZOE_ERROR_USAGE when it is not fetched, or fetched for backward with gradients acquired and not
 *  reduced. Thread-safe for different
 *  modules. */
ZOE_API zoe_status zoe_release(zoe_engine* engine, zoe_module_id module, zoe_stream* stream);
/** The device address of parameter `parameter`'s full value (its working dtype, row-major),
 *  valid from its module's zoe_fetch until its zoe_release. ZOE_ERROR_USAGE when its module is not
 *  fetched. Thread-safe. */
ZOE_API zoe_status zoe_parameter_address(zoe_engine* engine, zoe_parameter_id parameter, void** address);

/** zoe-owned device buffers for module `module`'s gradients, one per parameter in the order they
 *  were added, each numel elements of the parameter's working dtype, zero-filled in order with
 *  `stream`; NULL in a frozen parameter's slot (it takes no gradient). `count` must equal the
 *  module's parameter count. Write d(loss * loss_scale)/d(param) into them on `stream`, then hand
 *  them in with zoe_reduce_gradients. The buffers come from zero_optimization.reduce_bucket_size
 *  buckets (two with overlap_comm), each reduced whole once every module in it was handed in, in
 *  the order backward filled them; when none has room the call waits for one to drain. Hand each
 *  module's gradients in before acquiring many more: a bucket holding gradients not handed in
 *  drains only after they are. ZOE_ERROR_USAGE when the module is not fetched for backward, its
 *  gradients were already acquired in this micro-batch, or no bucket can drain until gradients
 *  acquired by this thread (or by threads themselves waiting here) are handed in: the wait would
 *  never end, so the call fails naming those modules (the thread that acquires a module's
 *  gradients is the one counted on to hand them in). Thread-safe for different modules. */
ZOE_API zoe_status zoe_module_gradients(zoe_engine* engine, zoe_module_id module, zoe_stream* stream, void** buffers,
                                        size_t count);
/** Hands in the module's gradients once the work queued on `stream` is done: they are reduced
 *  and summed into the gradient state (fp32) wherever it lives. The buffers are invalid after this
 *  call. ZOE_ERROR_USAGE when they were not acquired. Thread-safe for different modules on one
 *  rank; with several ranks the reduction is collective, so, as for zoe_fetch, each rank acquires and
 *  hands in the same modules in the same order (one driving thread per rank). */
ZOE_API zoe_status zoe_reduce_gradients(zoe_engine* engine, zoe_module_id module, zoe_stream* stream);

/* ---- activation checkpoints (ZeRO-R Pa+cpu) ---------------------------------------------------- */

typedef uint64_t zoe_activation_id;

/** Keeps a copy of `bytes` of device memory at `pointer` until backward: zoe copies it off the
 *  device in order with `stream` (work queued on `stream` after this call may change or free the
 *  buffer) into pinned host memory, or onto NVMe when the host share (zoe.activations.host_bytes)
 *  is full. ZOE_ERROR_USAGE outside a micro-batch or for NULL / zero bytes; ZOE_ERROR_MEMORY naming
 *  the size when neither share has room for it. One thread. */
ZOE_API zoe_status zoe_activation_save(zoe_engine* engine, const void* pointer, size_t bytes, zoe_stream* stream,
                                       zoe_activation_id* activation);
/** Brings activation `activation` back into device memory zoe allocates (counted against the
 *  budget); work queued on `stream` after this call sees it. Loading one starts bringing back the
 *  ones saved before it (reverse order, as backward asks for them), as far as the device share
 *  allows. ZOE_ERROR_USAGE for an unknown or freed id, or one already loaded; ZOE_ERROR_IO /
 *  ZOE_ERROR_CORRUPT naming the path and offset. One thread. */
ZOE_API zoe_status zoe_activation_load(zoe_engine* engine, zoe_activation_id activation, zoe_stream* stream,
                                       void** pointer);
/** Frees the activation (its device memory after the work queued on `stream`). Activations not
 *  freed by zoe_end_micro_batch are freed there. One thread. */
ZOE_API zoe_status zoe_activation_free(zoe_engine* engine, zoe_activation_id activation, zoe_stream* stream);

/* ---- the step ---------------------------------------------------------------------------------- */

/** What the loss is multiplied by before backward (fp16's dynamic loss scale; 1 otherwise). One
 *  thread. */
ZOE_API zoe_status zoe_loss_scale(const zoe_engine* engine, double* scale);

typedef struct zoe_step_result {
  size_t struct_size;      /**< sizeof(zoe_step_result), set by the caller */
  int skipped;             /**< 1: an inf or NaN in the gradients; no state changed but the loss scale */
  double loss_scale;       /**< the scale for the next step's loss */
  double grad_norm;        /**< global L2 norm of the averaged, unscaled gradients */
  double clip_coefficient; /**< what clipping multiplied the gradients by (1: not clipped) */
  int64_t optimizer_steps; /**< steps taken so far, skipped ones not counted */
} zoe_step_result;
#define ZOE_STEP_RESULT_INIT \
  { sizeof(zoe_step_result), 0, 1.0, 0.0, 1.0, 0 }

/** One optimizer step with learning rate `lr` over the gradients of the step's micro-batches
 *  (averaged, unscaled, clipped to gradient_clipping). ZOE_ERROR_USAGE naming lr unless it is in
 *  [0, FLT_MAX] (the optimizer computes in float; NaN is refused too); ZOE_ERROR_USAGE unless all
 *  gradient_accumulation_steps micro-batches are done and at least one module's gradients were
 *  reduced in them ("no gradient was reduced in this step"); on an I/O or memory failure every state
 *  is as it was and the step may be retried. ZOE_ERROR_DEVICE when the device fails while the step
 *  writes states that live on it in place: those cannot be put back, and every later zoe_step
 *  returns ZOE_ERROR_DEVICE naming the first failure (make a new engine and load a checkpoint).
 *  One thread. */
ZOE_API zoe_status zoe_step(zoe_engine* engine, double lr, zoe_step_result* result);

/** One parameter group's settings for zoe_step_groups (torch.optim's param_groups). eps 0 (as
 *  ZOE_GROUP_HYPER_INIT and a brace-initialized struct that stops at weight_decay leave it) means
 *  the configuration's betas and eps (optimizer.params); eps > 0 means beta1, beta2 and eps as
 *  given. An array of them is read with groups[0].struct_size as its stride, so a caller built
 *  against an older zoe.h (the struct ending at weight_decay) keeps working, its groups at the
 *  configuration's betas and eps; every element's struct_size must be the same. */
typedef struct zoe_group_hyper {
  size_t struct_size;  /**< sizeof(zoe_group_hyper) */
  double lr;           /**< in [0, FLT_MAX], as zoe_step's lr */
  double weight_decay; /**< finite and >= 0; applied as the configuration's optimizer type says */
  double beta1;        /**< in [0, 1) and below 1 as a float (read when eps > 0) */
  double beta2;        /**< likewise */
  double eps;          /**< 0: the configuration's betas and eps; else in (0, FLT_MAX] and not 0 as a float */
} zoe_group_hyper;
#define ZOE_GROUP_HYPER_INIT \
  { sizeof(zoe_group_hyper), 0.0, 0.0, 0.0, 0.0, 0.0 }

/** zoe_step with a learning rate, weight decay, betas and eps per parameter group
 *  (zoe_parameter_desc.group): groups[g] for group g. zoe_step(e, lr, r) is zoe_step_groups with
 *  every group at lr and the configuration's optimizer.params weight_decay, betas and eps. `count`
 *  must be the model's group count (max group + 1): ZOE_ERROR_USAGE naming both otherwise, and
 *  naming the group for a short or differing struct_size, an lr outside [0, FLT_MAX], a
 *  weight_decay that is not finite and >= 0, a beta outside [0, 1) or an eps that is not 0 and
 *  outside (0, FLT_MAX] (checked before anything changes). The optimizer (see engine/CONFIG.md, "optimizer"): "AdamW",
 * and "Adam" with adam_w_mode true (DeepSpeed's default), run torch.optim.AdamW's formula p -= lr * wd * p;  m = b1 m +
 * (1 - b1) g;  v = b2 v + (1 - b2) g^2; p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) and "Adam" with
 * adam_w_mode false torch.optim.Adam's (g += wd * p first, no decoupled decay), both in float. Otherwise as zoe_step.
 * One thread. */
ZOE_API zoe_status zoe_step_groups(zoe_engine* engine, const zoe_group_hyper* groups, size_t count,
                                   zoe_step_result* result);

/** Announces the settings the next zoe_step_groups will be given (zoe_step(e, lr, r): every group
 *  at lr and the configuration's optimizer.params.weight_decay), checked as zoe_step_groups checks
 *  them (ZOE_ERROR_USAGE before anything changes). With zoe.optimizer_in_backward (engine/CONFIG.md)
 *  each shard of the step's last micro-batch is stepped inside backward with these settings instead
 *  of the last step's, which a learning rate schedule changes every step: call it each step before
 *  or during that micro-batch's backward (a shard handed in before the call keeps the settings it
 *  was stepped with). Exact either way: the step commits a shard only when it was stepped with the
 *  settings the step is given and steps the others after backward, so a step given other settings
 *  than announced costs the I/O speculation did, never a bit of the result (zoe_statistics:
 *  "speculation" counts "committed" and "dropped"). It holds for the next step (taken, skipped or
 *  failed; one refused before anything changed keeps it); the step after that speculates with
 *  that step's settings again unless announced anew. One thread. */
ZOE_API zoe_status zoe_announce_step_groups(zoe_engine* engine, const zoe_group_hyper* groups, size_t count);

/* ---- reading states (debugging) --------------------------------------------------------------- */

typedef enum zoe_state {
  ZOE_STATE_PARAMETER = 0, /**< the fp32 master value */
  ZOE_STATE_GRADIENT = 1,  /**< as accumulated so far: summed over micro-batches, still loss-scaled */
  ZOE_STATE_EXP_AVG = 2,
  ZOE_STATE_EXP_AVG_SQ = 3
} zoe_state;

/** Copies state `state` of parameter `parameter` into `values` (`count` must be its numel) as
 *  fp32: the whole value on every rank, whatever the stage and world size. Several ranks: when the
 *  states are partitioned (stages 1-3 at world size > 1) it is collective: every rank calls it in
 *  the same order with the same parameter and state, and the shards are gathered; at stage 0 each
 *  rank reads its own whole replica and waits for no other (call it alike on every rank all the
 *  same, so the program does not depend on the stage). A frozen parameter's ZOE_STATE_PARAMETER is its value (its
 * 16-bit value widened); its other states are ZOE_ERROR_USAGE naming it. ZOE_ERROR_USAGE for a wrong count, an unknown
 *  parameter or state, inside a micro-batch, or a gradient before any was reduced. One thread. */
ZOE_API zoe_status zoe_read_state(zoe_engine* engine, zoe_parameter_id parameter, zoe_state state, float* values,
                                  size_t count);
/** The mirror of zoe_read_state, between steps (outside a micro-batch): sets state `state` of
 *  `parameter` to `values` (`count` = its numel, fp32, row-major): ZOE_STATE_PARAMETER sets the
 *  fp32 master, and the 16-bit working copy becomes its rounding to nearest even, as the step
 *  rounds it (a frozen 16-bit parameter keeps only that rounding); ZOE_STATE_EXP_AVG /
 *  ZOE_STATE_EXP_AVG_SQ set an Adam moment. Wherever the state lives (device, host, NVMe). Every
 *  rank passes the whole value and writes its own part of it; it is not collective (no rank waits
 *  for another), but every rank must make the same writes before the next collective call for the
 *  ranks to agree. ZOE_ERROR_USAGE for ZOE_STATE_GRADIENT, an unknown parameter or state, a wrong
 *  count, NULL values, inside a micro-batch, a moment of a
 *  frozen parameter, or a value that is NaN or infinite (naming the parameter and the index).
 *  A failure leaves the states as they were: everything is checked first, and states on NVMe are
 *  written to their shadow extents and committed once all are written, as the step does. One
 *  thread. */
ZOE_API zoe_status zoe_write_state(zoe_engine* engine, zoe_parameter_id parameter, zoe_state state, const float* values,
                                   size_t count);
/** The parameter's element count. Thread-safe. */
ZOE_API zoe_status zoe_parameter_numel(const zoe_engine* engine, zoe_parameter_id parameter, uint64_t* numel);

/* ---- checkpoints ------------------------------------------------------------------------------- */

/** Saves every state (but the gradient), the loss scaler and each parameter group's learning rate
 *  and weight decay as the last step used them under
 *  `directory`/`tag` (tag NULL or "": "step-<n>") and points `directory`/latest at it, crash-safe:
 *  a process killed during the save leaves the previous checkpoint loadable. Between steps only
 *  (ZOE_ERROR_USAGE otherwise). ZOE_ERROR_USAGE, nothing written, for a tag that is `latest`,
 *  `latest.tmp`, starts with '.' or holds '/', for a `directory`/`tag` that is a symbolic link, or
 *  for a loss scale that is not finite. One thread. */
ZOE_API zoe_status zoe_checkpoint_save(zoe_engine* engine, const char* directory, const char* tag);
/** Loads `directory`/`tag` (NULL or "": the latest). ZOE_ERROR_CORRUPT naming the file when it is
 *  missing, torn, corrupt or of another model, with nothing changed. Between steps only; the next
 *  micro-batch starts a new step. One thread. */
ZOE_API zoe_status zoe_checkpoint_load(zoe_engine* engine, const char* directory, const char* tag);

/** zoe_checkpoint_save that also keeps `bytes` opaque bytes of the caller's with the checkpoint (a
 *  framework's scheduler state, data position, random number generators): they go to
 *  `directory`/`tag`/client.bin within the same crash-safe save, and its size and XXH3-64 to the
 *  manifest, under the manifest's own checksum, so a blob that is torn or changed makes
 *  zoe_checkpoint_load fail with ZOE_ERROR_CORRUPT naming client.bin, nothing changed. `client` may
 *  be NULL when `bytes` is 0, and an empty blob is no blob (as zoe_checkpoint_save: no file, and
 *  zoe_checkpoint_client gives length 0 after its load); ZOE_ERROR_USAGE for NULL with bytes > 0.
 *  The blob is held whole in memory at save and load (meant for kilobytes to megabytes, not for
 *  tensors: those belong in the engine's states). Several ranks: collective as
 *  zoe_checkpoint_save; rank 0's blob is stored (the other ranks' `client` is not read), and the
 *  load gives it to every rank. Otherwise as zoe_checkpoint_save. One thread. */
ZOE_API zoe_status zoe_checkpoint_save_client(zoe_engine* engine, const char* directory, const char* tag,
                                              const void* client, size_t bytes);
/** The client blob (zoe_checkpoint_save_client) of the checkpoint this engine last loaded (the last
 *  zoe_checkpoint_load that succeeded; a failed load changes nothing): zoe_statistics' convention
 *  for binary bytes, with no NUL: when `capacity` holds the blob it is copied into `buffer`; a NULL
 *  buffer or a short capacity copies nothing; *length is the blob's size either way (call again
 *  with a buffer of *length bytes). *length is 0 when that checkpoint had no blob, or none was
 *  loaded. Every rank gets the same bytes. Not collective. One thread. */
ZOE_API zoe_status zoe_checkpoint_client(zoe_engine* engine, void* buffer, size_t capacity, size_t* length);
/** Each parameter group's learning rate, weight decay, betas and eps (the last two where the
 *  caller's struct has them) as the checkpoint this engine last loaded stored them (the last step's
 *  before its save; zoe_step_groups' order), so that a framework that resumes can set its
 *  param_groups back: groups[g] for group g, `count` the model's group count (ZOE_ERROR_USAGE naming
 *  both otherwise, and naming the group for a short or differing struct_size). A checkpoint that
 *  kept no per-group values (saved before they were kept, or by a model of another group count)
 *  gives every group its single lr and this configuration's weight decay, betas and eps, as the
 *  load takes them; one saved before groups kept betas and eps gives the ones it stepped with. ZOE_ERROR_USAGE when no
 * checkpoint was loaded. Not collective. One thread. */
ZOE_API zoe_status zoe_checkpoint_groups(zoe_engine* engine, zoe_group_hyper* groups, size_t count);

/* ---- statistics and timing --------------------------------------------------------------------- */

/** The engine's statistics as one JSON object: bytes and bandwidth per tier and direction, the time
 *  spent waiting on fetches, the optimizer's and the activations' figures, and the footprint plan
 *  against the peak use of each tier. Writes at most `capacity` bytes (NUL included) into `buffer`
 *  and sets *length to the JSON's length without the NUL; a NULL buffer or a short capacity only
 *  sets *length (call again with *length + 1). One thread. */
ZOE_API zoe_status zoe_statistics(zoe_engine* engine, char* buffer, size_t capacity, size_t* length);

/** Each stage of a training step's offload timed alone, over the model's real states. */
typedef struct zoe_stage_times {
  size_t struct_size; /**< sizeof(zoe_stage_times), set by the caller */
  double param_io_s;  /**< every module fetched and released for forward, then for backward: the step's parameter reads
                         alone */
  double adam_s;      /**< Adam over every shard with its NVMe parts already read */
  double optimizer_io_s; /**< the optimizer's NVMe reads and writes together, without Adam */
  double io_s; /**< the last step's NVMe bytes (below) read and written through the raw I/O engine alone (no swap store,
                  no checksums, no compute) at aio.queue_depth, the faster of both directions in flight together and
                  the reads alone then the writes alone: the drive's best time for the step's I/O, its floor
                  whatever the step overlaps; 0 without NVMe */
  uint64_t io_read_bytes; /**< NVMe bytes read from the last step's first zoe_begin_micro_batch to its zoe_step's end */
  uint64_t io_write_bytes; /**< the same for the bytes written */
} zoe_stage_times;
#define ZOE_STAGE_TIMES_INIT \
  { sizeof(zoe_stage_times), 0.0, 0.0, 0.0, 0.0, 0, 0 }

/** Times the stages above; changes no state (the optimizer stages write shadow extents and drop
 *  them; io_s's replay writes an unlinked scratch file in each swap folder, at most 2 GiB per
 *  direction, and removes it). Between steps only, after at least one step (ZOE_ERROR_USAGE
 *  otherwise). param_io_s is 0 while no fetch order is recorded yet (the steps fetched no module).
 *  The engine's statistics count these runs' transfers too: read zoe_statistics first for
 *  training's alone. One thread. */
ZOE_API zoe_status zoe_measure_stages(zoe_engine* engine, zoe_stage_times* times);

/* NOLINTEND(readability-identifier-naming) */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZOE_ZOE_H */
