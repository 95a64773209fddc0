"""python -m zoe.torch.bench: a GPT-2-shaped model trained with zoe.torch against plain torch.

Each run is a fresh process (so its peak RSS is its own), trains `--warmup` + `--steps` steps of the
same model, batches and AdamW, and reports the measured steps only:

- torch: the model and AdamW in ordinary memory, the floor of compute;
- zoe:   zoe.torch.initialize with fp32 parameters and Adam's states on NVMe (stage 3,
         offload_param and offload_optimizer on `--folder`, buffers sized from the model's largest
         module: _zoe_config), the model built under zoe.torch.Init. By default zoe runs as a user
         whose memory is short configures it (each a flag): a prefetch bucket of 1e7 elements, the
         gathered parameters capped at the largest module plus that bucket, one gradient bucket
         (overlap_comm off: one rank has nothing to overlap it with), the fp32 gradient on NVMe, no
         pending memory and no speculative step inside backward.

Runs alternate (torch, zoe, zoe, torch, ...) for `--rounds` rounds and the figures are medians over
them, and also round by round (a shared machine's load changes between rounds). Per step: time
(and its forward / backward / optimizer parts), the process's CPU time, bytes read and written
(zoe's statistics and the kernel's /proc/self/io), host<->device copies, the time inside zoe.torch's
hooks and the gradient bytes they copy into zoe's buffers; per run: peak RSS
(VmHWM), and for zoe the engine's own I/O of one step replayed alone (zoe_measure_stages' io_s:
the last step's NVMe reads and writes through the raw I/O engine, the faster of both at once and
one direction after the other; its parameter and
optimizer parts timed one by one are reported too). The target the issue sets: zoe's step <= 1.25 x max(torch's step,
zoe's I/O alone), and zoe's peak RSS below the model states (16 bytes per parameter with Adam).
Peak RSS is the child's VmHWM; "Python and torch" is its VmRSS after importing torch, before the
model exists, and the target compares the growth above it.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_RATIO = 1.25
_SUB_GROUP_ELEMENTS = 10_000_000
_PREFETCH_BUCKET_ELEMENTS = 10_000_000
_PARAM_BUFFER_ELEMENTS = 1 << 22
_BYTES_PER_STATE_ELEMENT = 16  # fp32 parameter, gradient, exp_avg, exp_avg_sq


def _arguments(argv):
    parser = argparse.ArgumentParser(
        prog="python -m zoe.torch.bench",
        description=(
            "Train a GPT-2-shaped model with zoe.torch (fp32, parameters and Adam states on NVMe) and "
            "with plain torch in ordinary memory, in alternating fresh processes, and report the "
            "medians: step time, peak RSS, bytes read/written per step, zoe's overhead and the "
            "step against max(torch step, zoe's I/O alone) (target <= 1.25)."
        ),
    )
    parser.add_argument("--layers", type=int, default=12, help="transformer blocks (default 12: GPT-2 small)")
    parser.add_argument("--hidden", type=int, default=768, help="model width (default 768: GPT-2 small)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads; must divide --hidden (default 12)")
    parser.add_argument("--vocab", type=int, default=50257, help="vocabulary size (default 50257: GPT-2's)")
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence (default 128)")
    parser.add_argument(
        "--batch",
        type=int,
        default=4,
        help="sequences per step (default 4: with --seq 128, 512 tokens, a step of a few seconds on two CPU cores)",
    )
    parser.add_argument("--steps", type=int, default=4, help="measured steps per run (default 4)")
    parser.add_argument("--warmup", type=int, default=1, help="steps run first and not measured (default 1)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of one torch and one zoe run (default 2)")
    parser.add_argument(
        "--folder",
        default=None,
        help="where zoe's swap files go (a real disk; default: a new folder in the temporary folder, removed after)",
    )
    parser.add_argument(
        "--budget-mib",
        type=int,
        default=0,
        help="zoe's device budget in MiB (default 0: what zoe's footprint plan asks for the model)",
    )
    parser.add_argument(
        "--gradient",
        choices=("nvme", "memory"),
        default="nvme",
        help="where zoe keeps the fp32 gradients (zoe.placement.gradient; default nvme: 4 bytes per "
        "parameter less memory for a write and a read of each per step; memory: pinned host memory)",
    )
    parser.add_argument(
        "--prefetch-bucket-size",
        type=float,
        default=_PREFETCH_BUCKET_ELEMENTS,
        help="zoe's stage3_prefetch_bucket_size in elements (default 1e7; DeepSpeed's is 5e7, which at "
        "124M makes the gathered-parameter arena hold every parameter)",
    )
    parser.add_argument(
        "--max-live-parameters",
        type=float,
        default=0,
        help="zoe's stage3_max_live_parameters in elements, which caps the gathered-parameter arena "
        "(default 0: the largest module plus the prefetch bucket; DeepSpeed's is 1e9)",
    )
    parser.add_argument(
        "--overlap-comm",
        action="store_true",
        help="two gradient buckets, backward filling one while the other is accumulated (DeepSpeed's "
        "stage-3 default); without it one bucket of the largest module",
    )
    parser.add_argument(
        "--optimizer-pending-mib",
        type=int,
        default=0,
        help="zoe.optimizer_pending_bytes in MiB (default 0; zoe's is 256): pageable memory for the "
        "fp32 masters backward's fetches hand the step",
    )
    parser.add_argument(
        "--optimizer-in-backward",
        action="store_true",
        help="zoe.optimizer_in_backward (zoe's default; off here by default, as the memory-short "
        "figures in the closing note were measured)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads in every run (default 0: torch's own)")
    parser.add_argument("--only", choices=("torch", "zoe"), help="run one side only (no ratio)")
    parser.add_argument("--json", metavar="PATH", help="also write every run's figures and the medians as JSON")
    parser.add_argument("--child", choices=("torch", "zoe"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hidden % args.heads:
        parser.error(f"--heads {args.heads} does not divide --hidden {args.hidden}")
    for name in ("layers", "hidden", "heads", "vocab", "seq", "batch", "steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    for name in ("prefetch_bucket_size", "max_live_parameters", "optimizer_pending_mib"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be at least 0")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    return args


# ---- what a run measures ---------------------------------------------------------------------------


def _status(key):
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _io():
    """The kernel's count of this process's bytes read and written from storage."""
    try:
        with open("/proc/self/io", encoding="ascii") as handle:
            fields = dict(line.split(": ") for line in handle.read().splitlines())
        return int(fields["read_bytes"]), int(fields["write_bytes"])
    except (OSError, KeyError, ValueError):
        return 0, 0


def _model(args):
    import torch

    from zoe.torch._gpt import GPT2

    torch.manual_seed(0)
    return GPT2(vocab=args.vocab, context=args.seq, width=args.hidden, heads=args.heads, layers=args.layers)


def _batches(args):
    from zoe.torch._gpt import token_batches

    return token_batches(args.warmup + args.steps, batch=args.batch, context=args.seq, vocab=args.vocab, seed=1)


def _zoe_config(args, folder, largest_module):
    # DeepSpeed's defaults size zoe's buffers for billions of elements (reduce_bucket_size 5e8,
    # sub_group_size 1e9, offload_param 5 buffers of 1e8): for this model each would be capped at the
    # whole model, and the buffers alone would hold several times the model states in memory. Sized
    # here as a user offloading to NVMe sizes them, from the largest module (the tied embedding):
    prefetch = int(args.prefetch_bucket_size)
    max_live = int(args.max_live_parameters) or largest_module + prefetch
    return {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": 1,
        # The torch loop does not clip, so neither does zoe (its default, as DeepSpeed's, is 1.0:
        # with it the losses parted from torch's by ~1e-4 from step 3 on).
        "gradient_clipping": 0.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
        "zero_optimization": {
            "stage": 3,
            # gradient buckets of the largest module (zoe's minimum): one, or two with --overlap-comm;
            "reduce_bucket_size": largest_module,
            "overlap_comm": args.overlap_comm,
            # the gathered-parameter arena: the largest module, what prefetch reads ahead, capped by
            # max_live (zoe's plan): 187 MiB at 124M, not the 334 the uncapped plan gives at this
            # bucket. The uncapped one no longer compacts at all (48 compactions in 3 steps before);
            # this one, 40 MiB beside the tied embedding, still compacts ~50 times a step (the
            # report counts them), the price of staying below the model states;
            "stage3_prefetch_bucket_size": prefetch,
            "stage3_max_live_parameters": max_live,
            # Adam over tiles of 1e7 elements, their reads and writes overlapping the arithmetic,
            # through one swap buffer of the largest tile (a parameter is not split: the embedding's
            # 38.6M elements), which zoe cuts into aio.block_size slots, plenty in flight;
            "sub_group_size": _SUB_GROUP_ELEMENTS,
            # every parameter on NVMe (max_in_cpu 0), streamed through 5 buffers of 4 Mi elements
            # (zoe moves a larger parameter in aio.block_size pieces).
            "offload_param": {
                "device": "nvme",
                "nvme_path": folder,
                "max_in_cpu": 0,
                "buffer_size": _PARAM_BUFFER_ELEMENTS,
            },
            "offload_optimizer": {
                "device": "nvme",
                "nvme_path": folder,
                "buffer_count": 1,
                "pipeline_read": True,
                "pipeline_write": True,
            },
        },
        "zoe": {
            "device": {"kind": "host"},
            "placement": {"gradient": {args.gradient: 1}},
            "optimizer_in_backward": args.optimizer_in_backward,
            "optimizer_pending_bytes": args.optimizer_pending_mib << 20,
        },
    }


def _largest_module(model):
    """Elements of the largest zoe module zoe.torch makes of the model (layout.py: a module's own
    parameters, or a tied parameter alone)."""
    from zoe.torch.layout import Layout

    layout = Layout(model, dict.fromkeys(model.parameters(), 0))
    return max(sum(slot.param.numel() for slot in unit.slots) for unit in layout.units)


def _timed(clock, key, fn):
    start = time.perf_counter()
    value = fn()
    clock[key] = clock.get(key, 0.0) + time.perf_counter() - start
    return value


def _run_child(args):
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    rss_before = _status("VmRSS")
    batches = _batches(args)
    if args.child == "torch":
        model = _model(args)
        parameters = _count(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)

        def forward(x, y):
            return model(x, y)

        def backward(loss):
            loss.backward()

        def step():
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)

        engine = None
    else:
        import zoe.torch

        folder = args.folder
        with zoe.torch.Init(spool_dir=folder):
            model = _model(args)
        parameters = _count(model)  # Init keeps every parameter's shape
        config = _zoe_config(args, folder, _largest_module(model))
        if args.budget_mib:
            config["zoe"]["device"]["budget_bytes"] = args.budget_mib << 20
        else:
            plan = zoe.torch.footprint_plan(model, config)
            config["zoe"]["device"]["budget_bytes"] = int(plan["device_bytes"] * 1.05) + (16 << 20)
        engine, _, _, _ = zoe.torch.initialize(model=model, config=config)

        def forward(x, y):
            return engine(x, y)

        def backward(loss):
            engine.backward(loss)

        def step():
            engine.step()

    figures = {"side": args.child, "steps": [], "parameters": parameters, "rss_ready_bytes": _status("VmRSS")}
    runtime = engine._runtime if engine else None  # zoe.torch's hooks, counting their time and copies
    io_start = stats_start = None
    for index, (x, y) in enumerate(batches):
        if index == args.warmup:
            io_start = _io()
            stats_start = engine.zoe_engine.statistics() if engine else None
        clock = {}
        hooks_before = runtime.hook_seconds if runtime else 0.0
        copies_before = runtime.gradient_copy_bytes if runtime else 0
        begin, cpu_begin = time.perf_counter(), time.process_time()
        loss = _timed(clock, "forward_s", lambda: forward(x, y))
        _timed(clock, "backward_s", lambda: backward(loss))
        _timed(clock, "optimizer_s", step)
        clock["step_s"] = time.perf_counter() - begin
        # CPU seconds of every thread of the process (torch's, zoe's I/O, copies and Adam): on a
        # shared machine less at the mercy of the other load than the wall time.
        clock["cpu_s"] = time.process_time() - cpu_begin
        if runtime:
            clock["hook_s"] = runtime.hook_seconds - hooks_before
            clock["gradient_copy_bytes"] = runtime.gradient_copy_bytes - copies_before
        clock["loss"] = loss.detach().item()
        if index >= args.warmup:
            figures["steps"].append(clock)
        print(f"  [{args.child}] step {index + 1}/{len(batches)}: {clock['step_s']:.3f} s, loss {clock['loss']:.4f}",
              file=sys.stderr, flush=True)
    io_end = _io()
    measured = len(figures["steps"])
    figures["kernel_read_bytes_per_step"] = (io_end[0] - io_start[0]) / measured
    figures["kernel_write_bytes_per_step"] = (io_end[1] - io_start[1]) / measured
    figures["peak_rss_bytes"] = _status("VmHWM")
    figures["rss_before_bytes"] = rss_before
    if engine is not None:
        stats = engine.zoe_engine.statistics()
        for key in ("nvme_read_bytes", "nvme_write_bytes", "host_device_copy_bytes", "fetch_wait_seconds"):
            figures[key + "_per_step"] = (stats[key] - stats_start[key]) / measured
        for key in ("arena_compactions", "arena_compaction_moved_bytes", "evictions"):
            figures[key + "_per_step"] = (stats["fetches"][key] - stats_start["fetches"][key]) / measured
        figures["arena_bytes"] = stats["fetches"]["arena_capacity_bytes"]
        figures["gradient_accumulate_s_per_step"] = (
            stats["gradients"]["accumulate_seconds"] - stats_start["gradients"]["accumulate_seconds"]
        ) / measured
        figures["device_budget_bytes"] = stats["footprint"]["device"]["budget_bytes"]
        figures["zoe_memory_peak_bytes"] = (
            stats["footprint"]["device"]["peak_bytes"] + stats["footprint"]["pinned_host"]["peak_bytes"]
        )
        figures["device_peak_bytes"] = stats["footprint"]["device"]["peak_bytes"]
        figures["pinned_host_peak_bytes"] = stats["footprint"]["pinned_host"]["peak_bytes"]
        stages = engine.zoe_engine.measure_stages()
        figures["param_io_s"] = stages.param_io_s
        figures["optimizer_io_s"] = stages.optimizer_io_s
        figures["adam_s"] = stages.adam_s
        figures["io_alone_s"] = stages.io_s
        engine.close()
    print(json.dumps(figures))


def _count(model):
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied one once


# ---- the parent: alternating runs and the report ---------------------------------------------------


def _median(runs, key):
    values = [run[key] for run in runs if key in run]
    return statistics.median(values) if values else None


def _median_step(runs, key):
    return statistics.median(step[key] for run in runs for step in run["steps"])


def _child(args, side, folder):
    command = [sys.executable, "-m", "zoe.torch.bench", "--child", side]
    for name in ("layers", "hidden", "heads", "vocab", "seq", "batch", "steps", "warmup", "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    command += ["--budget-mib", str(args.budget_mib), "--folder", folder, "--gradient", args.gradient]
    command += ["--prefetch-bucket-size", str(args.prefetch_bucket_size)]
    command += ["--max-live-parameters", str(args.max_live_parameters)]
    command += ["--optimizer-pending-mib", str(args.optimizer_pending_mib)]
    for flag in ("overlap_comm", "optimizer_in_backward"):
        if getattr(args, flag):
            command.append("--" + flag.replace("_", "-"))
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"zoe.torch.bench: the {side} run failed (exit status {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _paired_ratios(runs):
    """zoe's step / max(torch's step, zoe's I/O alone) of each round's two runs: on a shared machine
    the load changes between rounds more than within one."""
    ratios = []
    for first, second in zip(runs[::2], runs[1::2]):
        pair = {first["side"]: first, second["side"]: second}
        zoe_run, torch_run = pair["zoe"], pair["torch"]
        torch_step = statistics.median(step["step_s"] for step in torch_run["steps"])
        zoe_step = statistics.median(step["step_s"] for step in zoe_run["steps"])
        ratios.append(zoe_step / max(torch_step, zoe_run["io_alone_s"]))
    return ratios


def _report(runs, args):
    mib = 1 << 20
    lines = []
    by_side = {side: [r for r in runs if r["side"] == side] for side in ("torch", "zoe")}
    params = next(r["parameters"] for r in runs)
    states = params * _BYTES_PER_STATE_ELEMENT
    lines.append(
        f"GPT-2-shaped model: {args.layers} layers x {args.hidden}, {args.heads} heads, vocab {args.vocab}, "
        f"{params / 1e6:.1f}M parameters ({states / mib:.0f} MiB of fp32 model states with Adam); "
        f"batch {args.batch} x {args.seq} tokens; medians of {args.rounds} run(s) x {args.steps} step(s)"
    )
    lines.append(
        f"zoe's configuration: gradients in {args.gradient}, stage3_prefetch_bucket_size "
        f"{int(args.prefetch_bucket_size):.3g}, stage3_max_live_parameters "
        f"{int(args.max_live_parameters) or 'largest module + prefetch bucket'}, overlap_comm "
        f"{args.overlap_comm}, optimizer_in_backward {args.optimizer_in_backward}, optimizer_pending_bytes "
        f"{args.optimizer_pending_mib} MiB"
    )
    for side, side_runs in by_side.items():
        if not side_runs:
            continue
        lines.append(
            f"{side:>5}: step {_median_step(side_runs, 'step_s'):.3f} s (forward {_median_step(side_runs, 'forward_s'):.3f}, "
            f"backward {_median_step(side_runs, 'backward_s'):.3f}, optimizer {_median_step(side_runs, 'optimizer_s'):.3f}), "
            f"CPU {_median_step(side_runs, 'cpu_s'):.3f} s; "
            f"peak RSS {_median(side_runs, 'peak_rss_bytes') / mib:.0f} MiB "
            f"({_median(side_runs, 'rss_before_bytes') / mib:.0f} before the model: Python and torch; "
            f"{_median(side_runs, 'rss_ready_bytes') / mib:.0f} before the first step); storage per step (kernel) read "
            f"{_median(side_runs, 'kernel_read_bytes_per_step') / mib:.1f} MiB, written "
            f"{_median(side_runs, 'kernel_write_bytes_per_step') / mib:.1f} MiB"
        )
    zoe_runs, torch_runs = by_side["zoe"], by_side["torch"]
    if zoe_runs:
        lines.append(
            f"  zoe: NVMe per step read {_median(zoe_runs, 'nvme_read_bytes_per_step') / mib:.1f} MiB, written "
            f"{_median(zoe_runs, 'nvme_write_bytes_per_step') / mib:.1f} MiB; host<->device copies "
            f"{_median(zoe_runs, 'host_device_copy_bytes_per_step') / mib:.1f} MiB; fetch waits "
            f"{_median(zoe_runs, 'fetch_wait_seconds_per_step'):.3f} s; gradient accumulation "
            f"{_median(zoe_runs, 'gradient_accumulate_s_per_step'):.3f} s; device budget "
            f"{_median(zoe_runs, 'device_budget_bytes') / mib:.0f} MiB (peak {_median(zoe_runs, 'device_peak_bytes') / mib:.0f}), "
            f"pinned host peak {_median(zoe_runs, 'pinned_host_peak_bytes') / mib:.0f} MiB"
        )
        lines.append(
            f"  zoe's gathered-parameter arena: {_median(zoe_runs, 'arena_bytes') / mib:.0f} MiB; per step "
            f"{_median(zoe_runs, 'arena_compactions_per_step'):.1f} compactions moving "
            f"{_median(zoe_runs, 'arena_compaction_moved_bytes_per_step') / mib:.1f} MiB, "
            f"{_median(zoe_runs, 'evictions_per_step'):.1f} evictions"
        )
        lines.append(
            f"  zoe.torch's hooks: {_median_step(zoe_runs, 'hook_s'):.3f} s per step (Python, zoe's calls, waits on its "
            f"copies); gradients copied into zoe's buffers after autograd (tied or reused modules) "
            f"{_median_step(zoe_runs, 'gradient_copy_bytes') / mib:.1f} MiB per step"
        )
        lines.append(
            f"  zoe I/O of one step alone: {_median(zoe_runs, 'io_alone_s'):.3f} s, the faster of reads and writes at once "
            f"and one direction after the other "
            f"(parameters alone {_median(zoe_runs, 'param_io_s'):.3f} s, optimizer alone "
            f"{_median(zoe_runs, 'optimizer_io_s'):.3f} s; Adam alone {_median(zoe_runs, 'adam_s'):.3f} s)"
        )
    if zoe_runs and torch_runs:
        zoe_step = _median_step(zoe_runs, "step_s")
        torch_step = _median_step(torch_runs, "step_s")
        floor = max(torch_step, _median(zoe_runs, "io_alone_s"))
        compute_overhead = (_median_step(zoe_runs, "forward_s") + _median_step(zoe_runs, "backward_s")) - (
            _median_step(torch_runs, "forward_s") + _median_step(torch_runs, "backward_s")
        )
        ratio = zoe_step / floor
        grown = _median(zoe_runs, "peak_rss_bytes") - _median(zoe_runs, "rss_before_bytes")
        cpu_overhead = _median_step(zoe_runs, "cpu_s") - _median_step(torch_runs, "cpu_s")
        zoe_memory = _median(zoe_runs, "zoe_memory_peak_bytes")
        lines.append(
            f"  overhead zoe adds to forward+backward (hooks, fetches, copies): {compute_overhead:+.3f} s per step; "
            f"CPU time zoe adds to the step (all threads): {cpu_overhead:+.3f} s"
        )
        lines.append(
            f"  ratio: zoe step / max(torch step, zoe I/O alone) = {zoe_step:.3f} / {floor:.3f} = {ratio:.2f} "
            f"(target <= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'NOT met'}); zoe's peak RSS above "
            f"Python and torch's {grown / mib:.0f} MiB against {states / mib:.0f} MiB of model states "
            f"({'below' if grown < states else 'NOT below'}; zoe's own buffers at their peak "
            f"{zoe_memory / mib:.0f} MiB of it, the rest torch's: activations, temporaries, libraries loaded late)"
        )
        paired = _paired_ratios(runs)
        lines.append(
            f"  the same ratio within each round (its torch and zoe runs back to back, under the same load): "
            f"{', '.join(f'{r:.2f}' for r in paired)}; median {statistics.median(paired):.2f}"
        )
    return "\n".join(lines)


def main(argv=None):
    args = _arguments(sys.argv[1:] if argv is None else argv)
    if args.child:
        _run_child(args)
        return 0
    own_folder = args.folder is None
    folder = tempfile.mkdtemp(prefix="zoe-bench-") if own_folder else args.folder
    if not os.path.isdir(folder):
        raise SystemExit(f"zoe.torch.bench: --folder {folder!r} does not exist")
    sides = [args.only] if args.only else ["torch", "zoe"]
    runs = []
    try:
        for round_index in range(args.rounds):
            # Alternate which side goes first, so neither always meets a cold or a warm page cache.
            order = sides if round_index % 2 == 0 else sides[::-1]
            for side in order:
                print(f"round {round_index + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
                runs.append(_child(args, side, folder))
    finally:
        if own_folder:
            shutil.rmtree(folder, ignore_errors=True)
    report = _report(runs, args)
    print(report)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"arguments": vars(args), "runs": runs, "report": report}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
