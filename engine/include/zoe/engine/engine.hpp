#pragma once
// The one object a user holds: a model's states on their tiers and everything that moves them,
// wired from a configuration and a device. A training step is gradient_accumulation_steps
// micro-batches, each a forward and a backward pass, then step():
//
//   for each micro-batch:
//     begin_micro_batch()
//     forward:  fetch(m) -> wait -> compute with address(p) -> release(m, stream)   (every module)
//     backward: fetch(m) -> wait -> gradient_buffers(m, stream) -> write the module's gradients of
//               the loss multiplied by loss_scale() -> reduce_gradients(m, stream) -> release(m, stream)
//     end_micro_batch()
//   step(lr)
//
// The gradients are summed over the micro-batches in fp32 and averaged by step() (so k
// micro-batches of b samples step like one batch of k*b), unscaled by the loss scale and clipped to
// gradient_clipping by their global norm, all folded into Adam's grad_scale. An inf or NaN in them
// skips the step (the loss scale drops; fp16's dynamic scaling as DeepSpeed does it), and a skipped
// step does not advance the step count that bias correction uses. A step that fails (an NVMe read or
// write) leaves every state and the loss scaler as they were: call step() again.
//
// Many ranks (data parallel; the world from zoe.comm.backend, see engine/CONFIG.md): every rank
// builds the engine with the same model and configuration and makes the calls above in the same
// order, each handing in the gradients of its own part of the batch; the gradients are averaged
// over the ranks (so N ranks of b samples step like one rank of N*b). Each rank holds shard
// rank() of every state. Construction, read_state, step() (the norm and the
// inf/NaN check cover every rank's shards, so all ranks clip and skip alike), fetch and
// reduce_gradients are collective. A rank that fails or vanishes makes the others' calls fail
// with a comm_error naming it within zoe.comm.timeout_s. Below stage 3 the parameters are
// replicated (engine_resources.hpp): a module's first fetch after a step gathers it, later fetches
// find it on the device.
//
// Thread-safety: fetch, release, address, gradient_buffers and reduce_gradients may be called from
// several threads (for different modules); the rest from one thread, not concurrently with them.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/activations/activation_store.hpp"
#include "zoe/engine/checkpoint/checkpoint_fs.hpp"
#include "zoe/engine/config/config.hpp"
#include "zoe/engine/coordinator/coordinator.hpp"
#include "zoe/engine/engine_resources.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/optim/gradient_path.hpp"
#include "zoe/engine/optim/loss_scaler.hpp"
#include "zoe/engine/optim/optimizer_step.hpp"
#include "zoe/engine/swap/state_io.hpp"

namespace zoe::engine {

namespace detail {
class speculation_worker;
}  // namespace detail

struct engine_options {
  /// Passed to engine_resources_options (tests: a smaller arena, fault injection under the store).
  std::optional<std::uint64_t> arena_bytes;
  std::function<std::unique_ptr<io::io_backend>(std::unique_ptr<io::io_backend>)> wrap_backend;
  /// The file system checkpoints go through (tests: a fault-injecting one); null: the real one.
  checkpoint_fs* checkpoint_files = nullptr;
  /// The two worlds (engine_resources_options::comm / gradient_comm): both or neither; null: made
  /// from the configuration's zoe.comm.* keys (make_communicator, collective).
  communicator* comm = nullptr;
  communicator* gradient_comm = nullptr;
};

/// Each stage of a training step's offload timed alone (measure_stages()).
struct stage_times {
  /// The step's parameter reads: the fetches of a micro-batch in the prefetch trace's order (a
  /// training step's: forward, then backward), each waited for and released with no compute, once
  /// per micro-batch of the step (gradient_accumulation_steps), prefetching as a step does; 0 when
  /// the steps fetch no module (no trace).
  double param_io_s = 0;
  double adam_s = 0;          ///< optimizer_step::run_stages with Adam alone (its adam_seconds)
  double optimizer_io_s = 0;  ///< optimizer_step::run_stages with the reads and writes, without Adam
  /// The last step's NVMe bytes (io_read_bytes, io_write_bytes) replayed through the raw I/O
  /// engine alone (replay_raw: no store, no checksums, no compute) at aio.queue_depth, the faster
  /// of the reads and writes in flight together and the reads alone then the writes alone: the
  /// drive's best time for the step's I/O, whatever the step overlaps.
  /// 0 without NVMe.
  double io_s = 0;
  /// Every NVMe byte the mover read and wrote from the last step's first begin_micro_batch to the
  /// end of its step(), every stage's (parameters, gradients, optimizer, activations) together.
  std::uint64_t io_read_bytes = 0;
  std::uint64_t io_write_bytes = 0;
};

/// What step() did.
struct step_result {
  bool skipped = false;              ///< an inf or NaN in the gradients: no state changed but the loss scale
  double grad_norm = 0;              ///< global L2 norm of the averaged, unscaled gradients (inf or NaN when skipped)
  double clip_coefficient = 1;       ///< what clipping multiplied the gradients by (1: not clipped)
  double loss_scale = 1;             ///< the scale for the next step's loss
  std::int64_t optimizer_steps = 0;  ///< steps taken so far, skipped ones not counted (bias correction's count)
};

class offload_engine {
 public:
  /// Lays the model out, plans its footprint and builds every stage (see engine_resources: the plan
  /// is checked against this machine before anything is allocated, naming the keys to change).
  /// Every state starts released: set_parameter() (or load_checkpoint()) gives each parameter its
  /// value. Throws config_error naming the key for a configuration the engine cannot run, and what
  /// the stages throw. `dev` must outlive the engine.
  offload_engine(std::vector<module_spec> modules, const engine_config& config, device& dev,
                 engine_options options = {});
  ~offload_engine();
  offload_engine(const offload_engine&) = delete;
  offload_engine& operator=(const offload_engine&) = delete;

  [[nodiscard]] const engine_config& config() const noexcept { return config_; }
  [[nodiscard]] const model_layout& layout() const noexcept { return resources_->layout(); }
  [[nodiscard]] const footprint_plan& plan() const noexcept { return resources_->plan(); }

  // ---- values --------------------------------------------------------------------------------
  /// Gives `p` its value: `values` holds its numel elements (fp32, row-major). Every rank passes
  /// the same values and keeps its shard of them (elements [rank * shard_numel, ...)): the master
  /// takes them (padding zero), the working copy their cast to its dtype, both moments zero.
  /// usage_error naming the parameter for another count, or while a micro-batch is open.
  void set_parameter(parameter_id p, std::span<const float> values);
  /// Sets state `s` of `p` to `values` (its numel elements, fp32, row-major; every rank passes the
  /// whole value and writes its own shard): master sets the fp32 master and the working copy its
  /// cast (round to nearest even, as the step writes it); exp_avg / exp_avg_sq an Adam moment. Not
  /// collective. Either every state it writes takes the new value or none does: states on NVMe are
  /// written to their shadow extents and committed once all are written, memory homes keep an undo
  /// copy until then. usage_error naming the parameter for another state, another count, a value
  /// that is NaN or infinite (naming its index), or while a micro-batch is open; the I/O errors of
  /// the writes, with every state as it was.
  void write_state(parameter_id p, state_kind s, std::span<const float> values);
  /// The numel real elements of state `s` of `p`, as fp32 (the gradient: as accumulated so far,
  /// summed and still loss-scaled, averaged over the ranks), whole at any world size: at world size
  /// > 1 it is collective (every rank calls it, in the same order, for the same p and s) and
  /// gathers the shards through the gradient world, borrowing the padded parameter's bytes of
  /// device memory meanwhile. usage_error naming it while the state holds nothing yet, or while a
  /// micro-batch is open; a comm_error naming a rank that failed or vanished.
  [[nodiscard]] std::vector<float> read_state(parameter_id p, state_kind s);

  // ---- a micro-batch ---------------------------------------------------------------------------
  /// Opens the next micro-batch of the step. usage_error when one is open, when the step's
  /// micro-batches are all done and step() has not run, or while an inference fetch is open.
  void begin_micro_batch();
  /// Forward and backward fetches: coordinator::fetch / release / address. Outside a micro-batch a
  /// forward fetch is an inference fetch (a backward one is usage_error naming the module): it
  /// takes no gradient and counts as no micro-batch; the first one opens an inference step of the
  /// coordinator (step_kind::inference: the prefetch trace neither learns nor follows its order)
  /// and the release of the last one open ends it. Inference fetches are collective at world
  /// size > 1 as any fetch, and may come between any two micro-batches or steps; while one is open
  /// the calls that need the engine between steps (begin_micro_batch, step, read_state,
  /// write_state, the checkpoints, measure_stages) are usage_error.
  [[nodiscard]] fetch_handle fetch(module_id m, fetch_pass pass = fetch_pass::forward);
  void release(module_id m, stream_view stream = {});
  [[nodiscard]] void* address(parameter_id p) const;
  /// Device memory for module `m`'s gradients (gradient_path::acquire) and their hand-in
  /// (gradient_path::reduce).
  [[nodiscard]] std::vector<void*> gradient_buffers(module_id m, stream_view stream);
  void reduce_gradients(module_id m, stream_view stream);
  /// Closes the micro-batch: every fetch released, every gradient reduced and accumulated. A
  /// failure (an NVMe read or write of a gradient) is rethrown and the step's accumulation starts
  /// again at micro-batch 0. usage_error naming the module while one has a fetch not released or
  /// gradients acquired and not reduced: the micro-batch stays open (release / reduce it, then end
  /// it again). A failure of the coordinator's step end (a gather's collective) is rethrown after
  /// the micro-batch is counted.
  void end_micro_batch();

  // ---- the step --------------------------------------------------------------------------------
  /// What the loss is multiplied by before backward (fp16's loss scale; 1 otherwise).
  [[nodiscard]] double loss_scale() const noexcept { return scaler_.scale(); }
  /// One optimizer step with learning rate `lr` over the gradients of the step's micro-batches.
  /// usage_error unless all gradient_accumulation_steps micro-batches are done; loss_scale_error
  /// when fp16's scale would go below fp16.min_loss_scale; the I/O errors of the optimizer step,
  /// with every state as it was; device_error when the device fails while the step writes states
  /// that live on it in place, after which every later step is refused (optimizer_step.hpp).
  step_result step(double lr);
  /// step() with each parameter group's own learning rate, weight decay, betas and eps: groups[g]
  /// for the parameters of group g (parameter_spec::group); step(lr) is this with every group at lr
  /// and the configuration's optimizer weight_decay, betas and eps. usage_error, before anything
  /// changes, unless there is one entry per group (layout().group_count()), each lr in [0, FLT_MAX],
  /// each weight_decay finite and >= 0, each beta in [0, 1) and each eps in (0, FLT_MAX], the
  /// betas and eps not 1 or 0 as floats (naming the group).
  step_result step(std::span<const group_hyper> groups);
  /// Announces the settings the next step() will be given, so that the step inside backward
  /// (zoe.optimizer_in_backward) speculates with them instead of the last step's: with a learning
  /// rate schedule the last step's differ every step and every speculation would be dropped. Exact
  /// either way: step() commits a shard only when it was speculated with the settings step() is
  /// given, and steps the others after backward. Checked as step() checks its groups (usage_error
  /// before anything changes). Before or during the step's micro-batches, from the thread that
  /// drives them; shards speculated before the announcement keep the settings they ran with. It
  /// holds for the next step() (taken, skipped or failed; one refused before anything changed keeps
  /// it); the step after that speculates with that step's settings again unless announced anew.
  void announce_step(std::span<const group_hyper> groups);
  /// Each group's settings at the last step taken (or as loaded from a checkpoint; before any
  /// step, the configuration's).
  [[nodiscard]] std::span<const group_hyper> groups() const noexcept { return groups_; }

  // ---- checkpoints -----------------------------------------------------------------------------
  /// Saves every state (but the gradient), the loss scaler and the optimizer settings under
  /// root/tag (tag empty: "step-<n>", n the steps attempted) and points root/latest at it. Between
  /// steps only (usage_error while a micro-batch is open or the step's micro-batches are done and
  /// step() has not run). Returns the tag. At world size > 1 it is collective (every rank calls it,
  /// with the same root and tag; root on a file system every rank sees) and fails on every rank
  /// when it fails on one (checkpoint/checkpoint.hpp). The files do not depend on the world size.
  /// `client`: opaque bytes kept with the checkpoint (checkpoint_meta::client; empty: none); at
  /// several ranks rank 0's are saved.
  std::string save_checkpoint(const std::filesystem::path& root, const std::string& tag = "",
                              std::string_view client = {});
  /// Loads root/tag (root/latest when empty) into every state, the loss scaler and the learning
  /// rate; checkpoint_error naming the file when it is missing, torn, corrupt, of another model, or
  /// holds a scaler state this configuration refuses (nothing changed then). Between steps only
  /// (usage_error while a micro-batch is open or only some of the step's are done); the next
  /// micro-batch starts a new step. A checkpoint saved at any world size loads at any other; at
  /// world size > 1 it is collective, and a refusal on one rank is every rank's (no state changed
  /// on any rank).
  void load_checkpoint(const std::filesystem::path& root, const std::string& tag = "");
  /// What the checkpoint last loaded keeps for the caller.
  struct loaded_checkpoint {
    std::string client;               ///< its client bytes (empty: it has none)
    std::vector<group_hyper> groups;  ///< groups() as the load set them
  };
  /// The checkpoint last loaded (by this engine, successfully); nullopt before any load.
  [[nodiscard]] const std::optional<loaded_checkpoint>& loaded() const noexcept { return loaded_; }

  // ---- activation checkpoints -------------------------------------------------------------------
  /// The store activations are saved in during a micro-batch (sized by zoe.activations.*);
  /// end_micro_batch() clears it.
  [[nodiscard]] activation_store& activations() noexcept { return *activations_; }
  [[nodiscard]] bool micro_batch_open() const noexcept { return micro_batch_open_; }

  // ---- timing ------------------------------------------------------------------------------------
  /// Times each offload stage of a step alone over the model's real states, changing none of them
  /// (the optimizer stages run over the last step's gradients with the next step's settings, write
  /// shadow extents and drop them; the fetches follow the prefetch trace and record nothing; the
  /// gathered copies are dropped before and after, as an optimizer step leaves them), and replays
  /// the last step's NVMe bytes through the raw I/O engine (io_s: replay_raw, in scratch files of
  /// its own). The stages' counters (statistics_json) count the I/O it does (not the replay's);
  /// optimizer().last_step() stays the last step's. Between steps and after at least one step:
  /// usage_error otherwise (a micro-batch open or done, or no step's gradients). Throws the I/O
  /// errors of the reads and writes (a failed fetch is released and the coordinator's step ended
  /// first; the replay's name its scratch file), with every state as it was.
  stage_times measure_stages();

  // ---- the stages, for statistics and benchmarks -----------------------------------------------
  [[nodiscard]] engine_resources& resources() noexcept { return *resources_; }
  [[nodiscard]] gradient_path& gradients() noexcept { return *gradients_; }
  [[nodiscard]] optimizer_step& optimizer() noexcept { return *optimizer_; }
  [[nodiscard]] const loss_scaler& scaler() const noexcept { return scaler_; }
  [[nodiscard]] double lr() const noexcept { return lr_; }

 private:
  void expect_between_steps(const char* what) const;
  /// A group at `lr` with the configuration's weight decay, betas and eps.
  [[nodiscard]] group_hyper configured_group(double lr) const noexcept;
  /// An inference fetch is over (released, or its fetch failed): the last one ends the
  /// coordinator's inference step.
  void end_inference_fetch();
  /// usage_error naming `what` while a step that failed midway waits for its retry (bounded shadows).
  void expect_no_part_done_step(const char* what) const;
  /// usage_error naming `call` (and the group) unless `groups` has one entry per parameter group,
  /// each as step() takes it (lr, weight decay, betas, eps).
  void expect_group_settings(const char* call, std::span<const group_hyper> groups) const;
  /// From the step's last micro-batch on, each shard whose gradient is final is stepped ahead on the
  /// speculation thread (optimizer_step.hpp, "Speculation") with the settings this computes.
  void arm_speculation();
  /// Each parameter's speculative lr and weight decay from its group's in `groups`.
  void set_ahead_groups(std::span<const group_hyper> groups);
  /// No more shards are handed in; waits for the ones handed in. Never throws.
  void stop_speculation() noexcept;
  /// The gradient path's worker: hands a final gradient to the speculation while it is armed, and
  /// forgoes the speculation from the first gradient that shows the step will clip or skip.
  void on_final_gradient(const final_gradient& g);
  /// Hands the speculation the master shards backward's fetch of `m` brought (optimizer_step::
  /// keep_fetched_master), copied on `stream`.
  void keep_fetched_masters(module_id m, stream_view stream);
  /// Records what the mover moved since the step's first micro-batch began as the last step's.
  void note_step_io();
  /// This rank's shard of `values` (a whole parameter's), padding zero.
  [[nodiscard]] std::vector<float> own_shard(const parameter_layout& param, std::span<const float> values) const;

  engine_config config_;
  optimizer_config adam_settings_;
  /// Whether the gradient path's final gradients go to the speculation thread (read on its worker).
  std::atomic<bool> ahead_armed_{false};
  std::unique_ptr<engine_resources> resources_;
  std::unique_ptr<state_io> io_;
  std::unique_ptr<gradient_path> gradients_;
  std::unique_ptr<optimizer_step> optimizer_;
  std::unique_ptr<activation_store> activations_;
  checkpoint_fs* files_;
  loss_scaler scaler_;
  double lr_ = 0;
  std::vector<group_hyper> groups_;
  std::optional<loaded_checkpoint> loaded_;
  device* device_;
  std::size_t micro_batches_done_ = 0;  ///< of the current step
  /// The mover's byte counts when the current step's first micro-batch began, and what the last
  /// step that returned moved between that and its end (measure_stages replays it).
  mover_stats step_began_io_;
  std::uint64_t last_step_read_ = 0;
  std::uint64_t last_step_written_ = 0;
  bool micro_batch_open_ = false;
  /// Inference fetches not yet released (fetch() and release() run on several threads).
  mutable std::mutex inference_mutex_;
  std::size_t inference_fetches_ = 0;
  /// end_micro_batch ended the coordinator's step, then the gradient path refused to end its
  /// micro-batch (a module acquired and not reduced): ending the micro-batch again skips the
  /// coordinator.
  bool coordinator_step_ended_ = false;
  /// The settings announce_step() gave for the next step (nullopt: none; speculation takes the
  /// last step's).
  std::optional<std::vector<group_hyper>> announced_;
  /// The speculative step's settings per parameter (arm_speculation, announce_step; guarded by
  /// ahead_mutex_, the speculation thread reads them) and its thread (null with
  /// zoe.optimizer_in_backward off); last, so it stops before the stages it uses go.
  std::mutex ahead_mutex_;
  std::vector<kernels::adam_config> ahead_adam_;
  /// The loss scale the speculation assumes, the sum of squares of the final gradients seen so far
  /// (the gradient path's worker adds to it), and whether that shows the step will clip or skip
  /// (then the speculation thread forgoes the shards it is handed: optimizer_step::forgo).
  double ahead_scale_ = 1;
  double ahead_sum_ = 0;
  std::atomic<bool> ahead_forgone_{false};
  std::unique_ptr<detail::speculation_worker> ahead_;
};

}  // namespace zoe::engine
