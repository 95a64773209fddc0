// The engine: the stages wired together, and the arithmetic of a step that sits between them
// (averaging over micro-batches, loss scale, clipping), folded into Adam's grad_scale.
#include "zoe/engine/engine.hpp"

#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"
#include "zoe/kernels/cast.hpp"
#include "rank_collectives.hpp"
#include "speculation_worker.hpp"
#include "state_writes.hpp"
#include "step_arithmetic.hpp"

namespace zoe::engine {
namespace {

engine_resources_options resources_options(engine_options& o) {
  return {.arena_bytes = o.arena_bytes,
          .wrap_backend = std::move(o.wrap_backend),
          .comm = o.comm,
          .gradient_comm = o.gradient_comm};
}

gradient_path_options gradient_options(engine_resources& resources, const engine_config& config,
                                       std::function<void(const final_gradient&)> on_final) {
  const footprint_plan& plan = resources.plan();
  return {.bucket_bytes = plan.gradient_bucket_bytes,
          .bucket_count = static_cast<std::size_t>(plan.gradient_bucket_count),
          .staging_buffer_count = static_cast<std::size_t>(plan.gradient_buffer_count),
          .staging_buffer_bytes = static_cast<std::size_t>(plan.gradient_buffer_bytes),
          .quantized_scratch_bytes = static_cast<std::size_t>(plan.qgz_scratch_bytes),
          .accumulate_locally = accumulates_gradients_locally(config, resources.comm().size()),
          .on_final = std::move(on_final)};
}

activation_store_options activation_options(const footprint_plan& plan, const io::swap_store* store) {
  // Activations go to NVMe only where the plan gave them room in a store (activation_nvme_bytes).
  return {.host_bytes = plan.activation_host_bytes,
          .prefetch_bytes = plan.activation_prefetch_bytes,
          .nvme_bytes = store != nullptr ? plan.activation_nvme_bytes : 0,
          .staging_bytes = plan.activation_staging_bytes};
}

optimizer_step_options step_options(const footprint_plan& plan, const engine_config& config) {
  const offload_optimizer_config block = config.zero.offload_optimizer.value_or(offload_optimizer_config{});
  return {.sub_group_size = config.zero.sub_group_size,
          .buffer_count = static_cast<std::size_t>(plan.optimizer_buffer_count),
          .buffer_bytes = static_cast<std::size_t>(plan.optimizer_buffer_bytes),
          .undo_bytes = plan.optimizer_undo_bytes,
          .pipeline_read = block.pipeline_read,
          .pipeline_write = block.pipeline_write,
          .pending_bytes = plan.optimizer_pending_bytes,
          .adam_threads = {}};
}

// A group's settings on the Adam settings of one of its parameters.
void set_group(kernels::adam_config& adam, const group_hyper& g) noexcept {
  adam.lr = static_cast<float>(g.lr);
  adam.weight_decay = static_cast<float>(g.weight_decay);
  adam.beta1 = static_cast<float>(g.betas[0]);
  adam.beta2 = static_cast<float>(g.betas[1]);
  adam.eps = static_cast<float>(g.eps);
}

}  // namespace

offload_engine::offload_engine(std::vector<module_spec> modules, const engine_config& config, device& dev,
                               engine_options options)
    : config_(config),
      adam_settings_(config.optimizer.value_or(optimizer_config{})),
      resources_(std::make_unique<engine_resources>(std::move(modules), config, dev, resources_options(options))),
      io_(std::make_unique<state_io>(resources_->tiers(), dev, &resources_->movers())),
      gradients_(std::make_unique<gradient_path>(
          resources_->tiers(), resources_->gradient_comm(), dev, resources_->pinned(), &resources_->movers(),
          gradient_options(*resources_, resources_->config(),
                           [this](const final_gradient& g) { on_final_gradient(g); }))),
      optimizer_(std::make_unique<optimizer_step>(resources_->tiers(), dev, resources_->pinned(), &resources_->movers(),
                                                  step_options(resources_->plan(), config))),
      activations_(std::make_unique<activation_store>(dev, resources_->pinned(), &resources_->movers(),
                                                      activation_options(resources_->plan(), resources_->store()))),
      files_(options.checkpoint_files != nullptr ? options.checkpoint_files : &checkpoint_fs::posix()),
      scaler_(config.fp16),
      lr_(adam_settings_.lr),
      groups_(resources_->layout().group_count(), configured_group(adam_settings_.lr)),
      device_(&dev) {
  // The batch sizes as the resources resolved them for the world's size (known only there).
  config_.batch = resources_->config().batch;
  config_.gradient_accumulation_steps = resources_->config().gradient_accumulation_steps;
  if (config_.zoe.optimizer_in_backward) {
    ahead_ = std::make_unique<detail::speculation_worker>([this](parameter_id p) {
      if (ahead_forgone_.load()) {
        optimizer_->forgo(p);  // it would be dropped: no reads or writes for nothing
        return;
      }
      try {
        const kernels::adam_config adam = [&] {
          const std::lock_guard lock(ahead_mutex_);
          return ahead_adam_[p];
        }();
        optimizer_->speculate(p, adam);
      } catch (const std::exception& e) {  // settings the step itself would refuse: it says so then
        log::info("parameter '", layout().parameter(p).name, "' steps after backward: ", e.what());
      }
    });
  }
}

offload_engine::~offload_engine() {
  stop_speculation();
  // The caller's streams may still hold work on memory the stages own and free below (the
  // zero-fill of a lent gradient bucket, a copy into a gathered parameter): let it finish first.
  try {
    device_->synchronize();
  } catch (const std::exception& e) {
    log::warn("offload_engine: work queued on the device failed before the engine was destroyed: ", e.what());
  }
}

void offload_engine::expect_between_steps(const char* what) const {
  ZOE_EXPECTS(!micro_batch_open_, what, " while a micro-batch is open: end it first");
  const std::lock_guard lock(inference_mutex_);
  ZOE_EXPECTS(inference_fetches_ == 0, what, " while ", inference_fetches_,
              " inference fetch(es) (forward fetches outside a micro-batch) are not released: release them first");
}

void offload_engine::expect_no_part_done_step(const char* what) const {
  ZOE_EXPECTS(!optimizer_->part_done(), what,
              ": the last step failed midway with zoe.swap.shadows bounded and some states are stepped, others "
              "not; retry step() to finish it (or load a checkpoint)");
}

std::vector<float> offload_engine::own_shard(const parameter_layout& param, std::span<const float> values) const {
  // Elements [shard * shard_numel, (shard + 1) * shard_numel) of the padded parameter, the padding
  // zero. Every rank passes the same values and keeps its own part (at stage 0 the whole).
  const std::size_t rank = layout().shard_of(resources_->comm().rank());
  std::vector<float> shard(param.shard_numel, 0.0F);
  const std::uint64_t real = param.real_numel(rank);
  if (real > 0) std::memcpy(shard.data(), values.data() + rank * param.shard_numel, real * sizeof(float));
  return shard;
}

void offload_engine::set_parameter(parameter_id p, std::span<const float> values) {
  expect_between_steps("set_parameter");
  expect_no_part_done_step("set_parameter");
  const parameter_layout& param = layout().parameter(p);
  ZOE_EXPECTS(values.size() == param.numel, "set_parameter: parameter '", param.name, "' has ", param.numel,
              " elements, not ", values.size());
  const std::vector<float> master = own_shard(param, values);
  optimizer_->drop_speculation();  // stepped from the old value (and its shadows are rewritten below)
  // Gathered copies would go stale as the homes change: drop them, so the next fetch reads the new value.
  resources_->coord().drop_gathered();
  // A frozen 16-bit parameter keeps no master (nor moments): its working copy alone holds its value.
  if (state_bytes(param, state_kind::master) > 0) io_->write(p, state_kind::master, std::as_bytes(std::span(master)));
  if (state_bytes(param, state_kind::working) > 0) {
    std::vector<std::byte> working(state_bytes(param, state_kind::working));
    kernels::cast({kernels::dtype::fp32, master.data(), master.size()}, {param.dtype, working.data(), master.size()});
    io_->write(p, state_kind::working, working);
  }
  if (!param.frozen) {
    const std::vector<std::byte> zeros(state_bytes(param, state_kind::exp_avg), std::byte{0});
    io_->write(p, state_kind::exp_avg, zeros);
    io_->write(p, state_kind::exp_avg_sq, zeros);
  }
}

void offload_engine::write_state(parameter_id p, state_kind s, std::span<const float> values) {
  expect_between_steps("write_state");
  expect_no_part_done_step("write_state");
  const parameter_layout& param = layout().parameter(p);
  ZOE_EXPECTS(s == state_kind::master || s == state_kind::exp_avg || s == state_kind::exp_avg_sq, "write_state: the ",
              state_kind_name(s), " state of parameter '", param.name,
              "' cannot be written (its value, master, or an Adam moment can)");
  ZOE_EXPECTS(values.size() == param.numel, "write_state: parameter '", param.name, "' has ", param.numel,
              " elements, not ", values.size());
  ZOE_EXPECTS(!param.frozen || s == state_kind::master, "write_state: parameter '", param.name,
              "' is frozen: it has no ", state_kind_name(s), " state (only its value)");
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw usage_error(str("write_state: the ", state_kind_name(s), " of parameter '", param.name, "' at index ", i,
                            " is ", values[i], "; give finite values"));
    }
  }
  const std::vector<float> shard = own_shard(param, values);
  optimizer_->drop_speculation();  // stepped from the old value (and the write goes through the shadows)
  std::vector<detail::state_write> writes;
  if (state_bytes(param, s) > 0) {  // not the master of a frozen 16-bit parameter: its working copy is its value
    writes.push_back({s, std::vector<std::byte>(state_bytes(param, s))});
    std::memcpy(writes.back().bytes.data(), shard.data(), writes.back().bytes.size());
  }
  if (s == state_kind::master && state_bytes(param, state_kind::working) > 0) {
    // The working copy follows its master, rounded as the step rounds it.
    writes.push_back({state_kind::working, std::vector<std::byte>(state_bytes(param, state_kind::working))});
    kernels::cast({kernels::dtype::fp32, shard.data(), shard.size()},
                  {param.dtype, writes.back().bytes.data(), shard.size()});
  }
  // Gathered copies would go stale (and a dirty one would be written home over the new value later):
  // changes made to them go home first, then they are dropped.
  if (s == state_kind::master) resources_->coord().drop_gathered();
  detail::write_states_together(resources_->tiers(), *io_, p, writes);
}

std::vector<float> offload_engine::read_state(parameter_id p, state_kind s) {
  expect_between_steps("read_state");
  expect_no_part_done_step("read_state");
  const parameter_layout& param = layout().parameter(p);
  ZOE_EXPECTS(!param.frozen || s == state_kind::master || s == state_kind::working, "read_state: parameter '",
              param.name, "' is frozen: it has no ", state_kind_name(s), " state (only its value)");
  // An fp32 parameter's working copy is its master; a frozen 16-bit one's master is its working copy.
  const state_kind held = state_bytes(param, s) > 0  ? s
                          : s == state_kind::working ? state_kind::master
                                                     : state_kind::working;
  std::vector<std::byte> raw(state_bytes(param, held));
  io_->read(p, held, raw);
  // The shards of every rank in rank order are the padded parameter (collective at world size > 1);
  // a layout of one shard (stage 0) has it whole on every rank.
  const std::vector<std::byte> full = layout().options().world_size == 1
                                          ? std::move(raw)
                                          : detail::gather_shards(resources_->gradient_comm(), *device_, raw);
  std::vector<float> out(param.numel);
  kernels::cast({state_dtype(param, held), full.data(), param.numel}, {kernels::dtype::fp32, out.data(), out.size()});
  return out;
}

void offload_engine::begin_micro_batch() {
  expect_between_steps("begin_micro_batch");
  const std::size_t k = config_.gradient_accumulation_steps;
  ZOE_EXPECTS(micro_batches_done_ < k, "begin_micro_batch: the step's ", k,
              " micro-batches (gradient_accumulation_steps) are done; call step() first");
  if (micro_batches_done_ == 0) step_began_io_ = resources_->movers().stats();
  resources_->coord().begin_step();
  try {
    gradients_->begin_micro_batch(micro_batches_done_, k);
  } catch (...) {
    resources_->coord().end_step();
    throw;
  }
  micro_batch_open_ = true;
  if (ahead_ && micro_batches_done_ + 1 == k) arm_speculation();
}

fetch_handle offload_engine::fetch(module_id m, fetch_pass pass) {
  if (micro_batch_open_) return resources_->coord().fetch(m, pass);
  ZOE_EXPECTS(pass == fetch_pass::forward, "fetch of module '", layout().module(m).name,
              "' for backward outside a micro-batch: open one first (only a forward fetch may come outside one, "
              "for inference)");
  {
    const std::lock_guard lock(inference_mutex_);
    if (inference_fetches_ == 0) resources_->coord().begin_step(step_kind::inference);
    ++inference_fetches_;
  }
  try {
    return resources_->coord().fetch(m, pass);
  } catch (...) {
    // No fetch was opened (coordinator::fetch throws only then).
    end_inference_fetch();
    throw;
  }
}

void offload_engine::release(module_id m, stream_view stream) {
  resources_->coord().release(m, stream);
  if (!micro_batch_open_) end_inference_fetch();
}

void offload_engine::end_inference_fetch() {
  const std::lock_guard lock(inference_mutex_);
  ZOE_ASSERT(inference_fetches_ > 0);
  if (--inference_fetches_ == 0) resources_->coord().end_step();
}

void* offload_engine::address(parameter_id p) const { return resources_->coord().address(p); }

std::vector<void*> offload_engine::gradient_buffers(module_id m, stream_view stream) {
  return gradients_->acquire(m, stream);
}

void offload_engine::reduce_gradients(module_id m, stream_view stream) {
  if (ahead_armed_.load()) keep_fetched_masters(m, stream);
  gradients_->reduce(m, stream);
}

void offload_engine::keep_fetched_masters(module_id m, stream_view stream) {
  // A dequantized gather (qwZ) is not the master's bits.
  if (config_.zero.zero_quantized_weights) return;
  // Backward's fetch of m brought each fp32 parameter's master (its working copy) to the device:
  // this rank's shard of it goes to the speculation (or, when that is forgone, to the step after
  // backward), which then reads no master from NVMe. Queued on `stream` before the
  // gradients are handed in, so before the speculation can start.
  const std::uint64_t shard = layout().shard_of(resources_->comm().rank());
  for (const parameter_id p : layout().module(m).parameters) {
    const std::byte* gathered = nullptr;
    try {
      gathered = static_cast<const std::byte*>(resources_->coord().address(p));
    } catch (const usage_error&) {
      return;  // not fetched (the gradient path names what is wrong); its master is read from NVMe
    }
    const std::vector<std::span<std::byte>> kept = optimizer_->keep_fetched_master(p);
    if (kept.empty()) continue;
    const std::byte* from = gathered + shard * state_bytes(layout().parameter(p), state_kind::master);
    for (const std::span<std::byte> piece : kept) {
      device_->copy_async(piece.data(), from, piece.size(), copy_kind::device_to_host, stream);
      from += piece.size();
    }
    device_event ready = device_->create_event();
    device_->record(ready, stream);
    optimizer_->fetched_master_ready(p, std::move(ready));
  }
}

void offload_engine::end_micro_batch() {
  ZOE_EXPECTS(micro_batch_open_, "end_micro_batch without begin_micro_batch");
  // A call out of order is refused (usage_error) by the part that sees it before that part changes
  // anything: the micro-batch then stays open, to be ended again once the caller has done what is
  // missing. The coordinator's step ends first (it refuses a fetch not yet released), then the
  // gradient path's micro-batch (it refuses a module acquired and not reduced). Ending the
  // coordinator's step last left, after its refusal, the gradient path a micro-batch further on
  // than the engine and the coordinator's step open: no micro-batch could begin again.
  std::exception_ptr coordinator_failure;
  if (!coordinator_step_ended_) {
    try {
      resources_->coord().end_step();
    } catch (const usage_error&) {
      throw;
    } catch (...) {
      // A gather issued while the step ended failed (its collective): the coordinator's step is
      // over all the same, and the micro-batch's gradients are unaffected.
      coordinator_failure = std::current_exception();
    }
    coordinator_step_ended_ = true;
  }
  try {
    gradients_->end_micro_batch();
  } catch (const usage_error&) {
    if (coordinator_failure) {
      // Thrown in its place: logged, so that it is not lost.
      try {
        std::rethrow_exception(coordinator_failure);
      } catch (const std::exception& w) {
        log::error("while ending a micro-batch: ", w.what());
      }
    }
    throw;
  } catch (...) {
    micro_batch_open_ = false;
    coordinator_step_ended_ = false;
    micro_batches_done_ = 0;  // the accumulated gradients are incomplete: the step starts over
    stop_speculation();
    optimizer_->drop_speculation();
    activations_->clear();  // the micro-batch is over: its activations are not needed again
    throw;
  }
  micro_batch_open_ = false;
  coordinator_step_ended_ = false;
  activations_->clear();
  // The gradient path has this micro-batch: count it whatever else failed, so both agree on the
  // next one.
  ++micro_batches_done_;
  stop_speculation();  // every final gradient was handed in: what it steps is done before step()
  if (coordinator_failure) std::rethrow_exception(coordinator_failure);
}

void offload_engine::arm_speculation() {
  // The step as it goes when nothing overflowed and clipping leaves the gradients as they are (a
  // summary of norm 0 clips nothing), at the next step count, with each group's last settings: each
  // shard runs ahead as its gradient becomes final (optimizer_step.hpp) and step() commits the ones
  // whose settings it confirms. The announced settings, when the caller gave them, else the last
  // step's.
  const detail::prepared_step prepared = detail::prepare_step(config_, adam_settings_, gradient_summary{},
                                                              scaler_.scale(), lr_, scaler_.optimizer_steps() + 1);
  {
    const std::lock_guard lock(ahead_mutex_);
    ahead_adam_.assign(layout().parameters().size(), prepared.adam);
  }
  ahead_scale_ = scaler_.scale();
  ahead_sum_ = 0;
  ahead_forgone_.store(false);
  set_ahead_groups(announced_ ? *announced_ : groups_);
  ahead_armed_.store(true);
}

void offload_engine::on_final_gradient(const final_gradient& g) {
  if (!ahead_armed_.load()) return;
  // The step's summary is known only when backward has ended, but the parts seen so far bound it
  // from below (on every rank: the other ranks' parts only add): once they show that the step will
  // skip (an inf or NaN, whatever the loss scale) or clip, every speculation from here on would be
  // dropped, so none runs (step 1 of a run often clips).
  if (g.sum_of_squares) ahead_sum_ += *g.sum_of_squares;
  if (g.overflow || detail::surely_clipped(config_, ahead_sum_, ahead_scale_)) ahead_forgone_.store(true);
  ahead_->hand_in(g.param);
}

void offload_engine::set_ahead_groups(std::span<const group_hyper> groups) {
  const std::lock_guard lock(ahead_mutex_);
  for (const parameter_layout& p : layout().parameters()) set_group(ahead_adam_[p.id], groups[p.group]);
}

void offload_engine::announce_step(std::span<const group_hyper> groups) {
  expect_group_settings("announce_step", groups);
  announced_.emplace(groups.begin(), groups.end());
  // Armed already (backward of the step's last micro-batch): the shards handed in from now on run
  // with them; the ones before keep the settings they ran with, and step() sorts them out.
  if (ahead_armed_.load()) set_ahead_groups(*announced_);
}

void offload_engine::expect_group_settings(const char* call, std::span<const group_hyper> groups) const {
  ZOE_EXPECTS(groups.size() == layout().group_count(), call, ": ", groups.size(),
              " parameter groups' settings given; the model has ", layout().group_count(),
              " groups (the largest parameter group + 1)");
  // The Adam kernel computes in float: a rate beyond float's range would reach it as inf and fail
  // the step there, naming no argument. Written so that NaN fails the comparison.
  constexpr double largest = std::numeric_limits<float>::max();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string which = groups.size() == 1 ? std::string() : str(" of parameter group ", g);
    if (!(groups[g].lr >= 0 && groups[g].lr <= largest)) {
      throw usage_error(str(call, ": lr ", groups[g].lr, which,
                            " is not a learning rate the optimizer can use: give a finite number in [0, ", largest,
                            "] (the Adam kernel computes in float)"));
    }
    if (!(groups[g].weight_decay >= 0 && groups[g].weight_decay <= largest)) {
      throw usage_error(str(call, ": weight_decay ", groups[g].weight_decay, which,
                            " is not a weight decay the optimizer can use: give a finite number in [0, ", largest,
                            "]"));
    }
    for (std::size_t i = 0; i < 2; ++i) {
      // Below 1 as the float the kernel computes with (1 - beta^t would be 0 at 1).
      const double beta = groups[g].betas.at(i);
      if (!(beta >= 0 && static_cast<float>(beta) < 1.0F)) {
        throw usage_error(str(call, ": betas[", i, "] ", beta, which,
                              " is not a beta the optimizer can use: give a number in [0, 1) (below 1 as a float)"));
      }
    }
    const double eps = groups[g].eps;
    if (!(eps > 0 && eps <= largest && static_cast<float>(eps) > 0.0F)) {
      throw usage_error(str(call, ": eps ", eps, which, " is not an eps the optimizer can use: give a number in (0, ",
                            largest, "] that is not 0 as a float"));
    }
  }
}

void offload_engine::stop_speculation() noexcept {
  ahead_armed_.store(false);
  if (ahead_) ahead_->wait_idle();
}

void offload_engine::note_step_io() {
  const mover_stats now = resources_->movers().stats();
  last_step_read_ = now.bytes_read - step_began_io_.bytes_read;
  last_step_written_ = now.bytes_written - step_began_io_.bytes_written;
}

group_hyper offload_engine::configured_group(double lr) const noexcept {
  return group_hyper{
      .lr = lr, .weight_decay = adam_settings_.weight_decay, .betas = adam_settings_.betas, .eps = adam_settings_.eps};
}

step_result offload_engine::step(double lr) {
  const std::vector<group_hyper> every(layout().group_count(), configured_group(lr));
  return step(every);
}

step_result offload_engine::step(std::span<const group_hyper> groups) {
  expect_between_steps("step");
  const std::size_t k = config_.gradient_accumulation_steps;
  ZOE_EXPECTS(micro_batches_done_ == k, "step: ", micro_batches_done_, " of the step's ", k,
              " micro-batches (gradient_accumulation_steps) have handed in their gradients");
  expect_group_settings("step", groups);
  announced_.reset();  // it was for this step
  // Every rank's shards together: each rank takes the same clip and skip decision. With one shard
  // (stage 0) every rank's summary is already the whole all-reduced gradient's, the same bits on
  // each: adding the replicas would count it once per rank.
  const gradient_summary g = layout().options().world_size == 1
                                 ? gradients_->summary()
                                 : detail::global_summary(resources_->gradient_comm(), *device_, gradients_->summary());
  const double scale = scaler_.scale();
  const loss_scaler_state before = scaler_.state();

  step_result out;
  out.grad_norm = detail::averaged_norm(g, k) / scale;
  if (scaler_.update(g.overflow)) {
    optimizer_->drop_speculation();
    micro_batches_done_ = 0;
    note_step_io();
    out.skipped = true;
    out.loss_scale = scaler_.scale();
    out.optimizer_steps = scaler_.optimizer_steps();
    log::info("step skipped: the gradients hold an inf or NaN; loss scale ", scale, " -> ", out.loss_scale);
    return out;
  }
  const detail::prepared_step prepared =
      detail::prepare_step(config_, adam_settings_, g, scale, groups.front().lr, scaler_.optimizer_steps());
  std::vector<kernels::adam_config> adam(layout().parameters().size(), prepared.adam);
  for (const parameter_layout& p : layout().parameters()) set_group(adam[p.id], groups[p.group]);
  try {
    // The gathered copies are about to be stale; changes made to them on the device go home first.
    resources_->coord().drop_gathered();
    optimizer_->run(std::span<const kernels::adam_config>(adam));
  } catch (...) {
    scaler_.restore(before);
    throw;
  }
  micro_batches_done_ = 0;
  note_step_io();
  lr_ = groups.front().lr;
  groups_.assign(groups.begin(), groups.end());
  out.clip_coefficient = prepared.clip;
  out.loss_scale = scaler_.scale();
  out.optimizer_steps = scaler_.optimizer_steps();
  return out;
}

std::string offload_engine::save_checkpoint(const std::filesystem::path& root, const std::string& tag,
                                            std::string_view client) {
  expect_between_steps("save_checkpoint");
  ZOE_EXPECTS(micro_batches_done_ == 0, "save_checkpoint: ", micro_batches_done_,
              " micro-batches of a step have gradients that are not stepped yet; save after step()");
  const std::string name = tag.empty() ? str("step-", scaler_.state().cur_iter) : tag;
  // Collective on the gradient world, which carries the engine's collectives between steps.
  zoe::engine::save_checkpoint(root, name, resources_->tiers(), *io_,
                               checkpoint_meta{.scaler = scaler_.state(),
                                               .optimizer = adam_settings_,
                                               .lr = lr_,
                                               .groups = groups_,
                                               .client = std::string(client)},
                               checkpoint_ranks{.comm = resources_->gradient_comm(), .dev = *device_}, *files_);
  return name;
}

void offload_engine::load_checkpoint(const std::filesystem::path& root, const std::string& tag) {
  expect_between_steps("load_checkpoint");
  // Between two micro-batches of a step the gradient path expects the step's next micro-batch, not
  // micro-batch 0 of a new one: no micro-batch could begin after the load. (After a failed step
  // every micro-batch is done and the next one starts a step: a load may come then.)
  const std::size_t k = config_.gradient_accumulation_steps;
  ZOE_EXPECTS(micro_batches_done_ == 0 || micro_batches_done_ == k, "load_checkpoint: ", micro_batches_done_,
              " of the step's ", k,
              " micro-batches (gradient_accumulation_steps) are done; load between steps (finish the step's "
              "micro-batches and step() first)");
  resources_->coord().drop_gathered();
  optimizer_->drop_speculation();  // the checkpoint's states replace the ones it stepped from
  // The saved scaler state must suit this configuration (fp16.hysteresis, min_loss_scale) before
  // any state is overwritten: refused afterwards, the states would be the checkpoint's and the
  // scaler, the step count and the learning rate not.
  checkpoint_meta meta = zoe::engine::load_checkpoint(
      root, tag, resources_->tiers(), *io_, checkpoint_ranks{.comm = resources_->gradient_comm(), .dev = *device_},
      *files_, [this](const checkpoint_meta& m) {
        loss_scaler probe(config_.fp16);
        probe.restore(m.scaler);
      });
  optimizer_->abandon_part_done();  // every state is the checkpoint's now
  scaler_.restore(meta.scaler);
  lr_ = meta.lr;
  if (meta.groups.size() == groups_.size()) {
    groups_ = meta.groups;
  } else {
    // Saved before groups were kept (every group stepped with lr and the configured decay), or by
    // a model of other groups: every group takes the saved rate.
    if (!meta.groups.empty()) {
      log::warn("the checkpoint under ", root.string(), " has ", meta.groups.size(), " parameter groups, this model ",
                groups_.size(), "; every group takes its learning rate ", meta.lr);
    }
    groups_.assign(groups_.size(), configured_group(meta.lr));
  }
  loaded_ = loaded_checkpoint{.client = std::move(meta.client), .groups = groups_};
  micro_batches_done_ = 0;
  if (meta.optimizer.betas != adam_settings_.betas || meta.optimizer.eps != adam_settings_.eps ||
      meta.optimizer.weight_decay != adam_settings_.weight_decay ||
      meta.optimizer.adam_w_mode != adam_settings_.adam_w_mode) {
    log::warn("the checkpoint under ", root.string(),
              " was stepped with other optimizer settings than "
              "this configuration's; the configuration's are used from here on");
  }
}

}  // namespace zoe::engine
