"""meshplan's reference plan runner: run a Plan under torchrun on synthetic data and measure it.

    torchrun --nproc-per-node N [--nnodes ...] -m profiler.run_plan --plan plan.json \
        [--steps K] [--warmup W] [--seed S] [--report FILE | --report-url URL --api-key KEY]

Builds the plan's built-in GPT/Llama (`profiler.models`), a ("pp", "dp", "tp") DeviceMesh, the
plan's stages with tensor parallel, recompute and data parallel as planned, and runs the plan's
schedule with `torch.distributed.pipelining`. Measures step time (median over K steps after W
warm-up steps), each rank's busy time (so the bubble), per-stage activation and peak memory, and
the loss; writes a `planner.runreport.RunReport`. See docs/runner.md. The saved-activation
meter (a Python hook per saved tensor) runs only in the untimed warm-up steps (one untimed step
when W = 0), so that it costs the timed steps nothing.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage

from planner.plan import Plan
from profiler.rank_exit import exit_rank
from profiler.runner.folded import Folded, check_folded, folded_groups
from profiler.runner.measure import BusyTimer, SavedBytesMeter, static_bytes
from profiler.runner.mesh import RunMesh, init_mesh
from profiler.runner.model import RunModel, load_model
from profiler.runner.options import RunOptions, load_plan, parse_args
from profiler.runner.parallel import (
    allreduce_grads,
    apply_recompute,
    apply_tp,
    sequence_gather,
    sequence_scatter,
    uses_ddp,
    wrap_dp,
)
from profiler.runner.report import (
    RankResult,
    build_report,
    dump_grads,
    full_grads,
    post_report,
    write_report,
)
from profiler.runner.schedule import build_schedule
from profiler.runner.split import StageModule, local_stages, stage_layout
from profiler.runner.tied import TiedEmbeddings

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def synthetic_batch(
    plan: Plan, *, seed: int, step: int, vocab_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of one step: random tokens and labels, [global_batch, seq_length].

    `vocab_size` defaults to the plan's `arch.vocab_size`."""
    if vocab_size is None:
        if plan.arch is None:
            raise ValueError("synthetic_batch needs vocab_size when the plan has no arch")
        vocab_size = plan.arch.vocab_size
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    shape = (plan.global_batch_size, plan.seq_length)
    tokens = torch.randint(vocab_size, shape, generator=gen)
    labels = torch.randint(vocab_size, shape, generator=gen)
    return tokens, labels


def make_optimizer(name: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """The runner's optimizer: Adam (lr 1e-4), or SGD with momentum 0.9 (lr 1e-4), whose
    update is linear in the gradient (the tests replay it in one process)."""
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    return torch.optim.SGD(params, lr=1e-4, momentum=0.9)


def build_stages(
    plan: Plan,
    rm: RunMesh,
    run_model: RunModel,
    *,
    dtype: torch.dtype,
    folded: Folded | None = None,
) -> tuple[list[nn.Module], list[PipelineStage]]:
    """This rank's stage modules (wrapped for dp; with `folded`, on this rank's sequence
    chunks and experts, gradients synced by hand) and their PipelineStages."""
    model = run_model
    mine = local_stages(plan, rm.pp_rank, num_blocks=run_model.num_blocks)
    ddp = folded is None and uses_ddp(
        tp=plan.tp, dp=plan.dp, zero_stage=plan.zero_stage, schedule=plan.schedule
    )
    sp = plan.sequence_parallel and plan.tp > 1
    modules: list[nn.Module] = []
    stages: list[PipelineStage] = []
    for lay in mine:
        blocks: dict[int, nn.Module] = {}
        for j in lay.blocks:
            block = model.layers[j].to(device=rm.device, dtype=dtype)
            if plan.tp > 1:
                assert run_model.family is not None  # checked by load_model
                apply_tp(block, rm.tp_mesh, family=run_model.family, sequence_parallel=sp)
            blocks[j] = apply_recompute(block, lay.recompute[j + 1])
        embedding = head = None
        if lay.has_embedding:
            embedding = apply_recompute(model.embedding.to(rm.device, dtype), lay.recompute[0])
        if lay.has_head:
            head = apply_recompute(
                model.head.to(rm.device, dtype), lay.recompute[len(model.layers) + 1]
            )
        module: nn.Module = StageModule(
            embedding=embedding,
            blocks=blocks,
            head=head,
            scatter=sequence_scatter(rm.tp_mesh) if sp else None,
            gather=sequence_gather(rm.tp_mesh) if sp else None,
        )
        if folded is not None:
            folded.apply(module)
        module = wrap_dp(module, dp_mesh=rm.dp_mesh, zero_stage=plan.zero_stage, ddp=ddp)
        modules.append(module)
        stages.append(
            PipelineStage(module, lay.index, plan.pp * plan.vpp, rm.device, group=rm.pp_group)
        )
    return modules, stages


def run(opts: RunOptions) -> int:
    plan, doc_id = load_plan(opts.plan_path)
    check_folded(plan)
    plan_id = opts.plan_id or doc_id
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    rm = init_mesh(plan, device=opts.device)
    dtype = DTYPES[opts.dtype or ("bf16" if rm.device.type == "cuda" else "fp32")]
    run_model = load_model(plan, factory=opts.model_factory, seed=opts.seed)
    vocab_size, tied_embeddings = run_model.vocab_size, run_model.tied
    layouts = stage_layout(plan, num_blocks=run_model.num_blocks)
    local_ids = [s.index for s in layouts if s.rank == rm.pp_rank]
    folded = folded_groups(plan, rm) if plan.cp > 1 or plan.ep > 1 else None
    modules, stages = build_stages(plan, rm, run_model, dtype=dtype, folded=folded)
    del run_model  # this rank's layers live on in `modules`; the rest is freed
    params = [p for m in modules for p in m.parameters()]
    tied = (
        TiedEmbeddings(rm, first_rank=layouts[0].rank, last_rank=layouts[-1].rank)
        if tied_embeddings
        else None
    )
    ddp = folded is None and uses_ddp(
        tp=plan.tp, dp=plan.dp, zero_stage=plan.zero_stage, schedule=plan.schedule
    )
    manual_dp = folded is None and plan.dp > 1 and plan.zero_stage == 0 and not ddp

    timer = BusyTimer(rm.device)
    meter = SavedBytesMeter([*params, *(b for m in modules for b in m.buffers())])
    for stage, index in zip(stages, local_ids, strict=True):
        _instrument(stage, index, timer, meter)
    schedule = build_schedule(plan.schedule, stages, num_microbatches=plan.num_microbatches)
    optimizer = make_optimizer(opts.optimizer, params)
    per_dp = plan.micro_batch_size * plan.num_microbatches
    rows = slice(rm.dp_rank * per_dp, (rm.dp_rank + 1) * per_dp)
    last_stage = any(s.is_last for s in stages)

    step_times: list[float] = []
    pipeline_times: list[float] = []
    busy: list[float] = []
    busy_cpu: list[float] = []
    losses: list[float] = []
    static = (0, 0, 0)
    # The activation meter runs in the untimed steps only (at least one), its peaks from the
    # last of them (a steady step); the timed steps run without its hooks.
    untimed = max(opts.warmup, 1)
    for step in range(untimed + opts.steps):
        tokens, labels = synthetic_batch(plan, seed=opts.seed, step=step, vocab_size=vocab_size)
        tokens, labels = tokens[rows], labels[rows]
        if folded is not None:
            tokens, labels = folded.shard(tokens), folded.shard(labels)
        tokens, labels = tokens.to(rm.device), labels.to(rm.device)
        meter.active = step < untimed
        if step == untimed - 1:
            meter.reset_peaks()
        if step == untimed and rm.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(rm.device)
        dist.barrier()
        t0 = time.perf_counter()
        mb_losses: list[torch.Tensor] = []
        args = (tokens,) if any(s.is_first for s in stages) else ()
        schedule.step(*args, target=labels, losses=mb_losses, return_outputs=False, labels=labels)
        if rm.device.type == "cuda":
            torch.cuda.synchronize(rm.device)
        t_pipeline = time.perf_counter() - t0
        if manual_dp:
            allreduce_grads(params, rm.dp_group)
        if folded is not None:
            folded.sync_grads(modules)
        if tied is not None:
            tied.sync(modules)
        if opts.dump_grads is not None:
            dump_grads(full_grads(modules), opts.dump_grads / f"step{step}", rank=rm.rank)
        optimizer.step()
        static = static_bytes(params, optimizer)  # grads still held, optimizer state built
        optimizer.zero_grad(set_to_none=True)
        if rm.device.type == "cuda":
            torch.cuda.synchronize(rm.device)
        # the slowest rank's times from the common start: step, and the schedule alone
        elapsed = torch.tensor([time.perf_counter() - t0, t_pipeline], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        step_busy_cpu = timer.cpu_s
        step_busy = sum(timer.take().values())
        if step >= untimed:
            step_times.append(float(elapsed[0]))
            pipeline_times.append(float(elapsed[1]))
            busy.append(step_busy)
            busy_cpu.append(step_busy_cpu)
            if last_stage and rm.tp_rank == 0 and mb_losses:
                losses.append(float(torch.stack([x.detach().float() for x in mb_losses]).mean()))

    result = RankResult(
        rank=rm.rank,
        pp_rank=rm.pp_rank,
        dp_rank=rm.dp_rank,
        tp_rank=rm.tp_rank,
        busy_s=tuple(busy),
        busy_cpu_s=tuple(busy_cpu) if rm.device.type == "cpu" else (),
        stage_activation_bytes={i: meter.peak_bytes.get(i, 0) for i in local_ids},
        activation_bytes=meter.rank_peak_bytes,
        params_bytes=static[0],
        grads_bytes=static[1],
        optimizer_bytes=static[2],
        cuda_peak_bytes=(
            int(torch.cuda.max_memory_allocated(rm.device)) if rm.device.type == "cuda" else None
        ),
        losses=tuple(losses),
    )
    gathered: list[RankResult | None] = [None] * rm.world_size
    dist.all_gather_object(gathered, result)
    if rm.rank == 0:
        results = [r for r in gathered if r is not None]
        device = torch.cuda.get_device_name(rm.device) if rm.device.type == "cuda" else "cpu"
        report = build_report(
            plan,
            results,
            step_times_s=step_times,
            pipeline_times_s=pipeline_times,
            warmup=untimed,
            device=device,
            backend=rm.backend,
            plan_id=plan_id,
            started_at=started_at,
            notes=_notes(plan, opts, dtype=dtype, ddp=ddp, manual_dp=manual_dp),
        )
        if opts.report_path is not None:
            write_report(report, opts.report_path)
        if opts.report_url is not None and opts.api_key is not None:
            if plan_id is None:
                raise ValueError("--report-url needs the plan id: pass --plan-id or a stored plan")
            post_report(report, url=opts.report_url, api_key=opts.api_key, plan_id=plan_id)
        if not opts.quiet:
            _print_summary(plan, report)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _instrument(stage: PipelineStage, index: int, timer: BusyTimer, meter: SavedBytesMeter) -> None:
    """Time the stage's compute calls and count what its forwards save for backward (while
    the meter is active: the untimed steps)."""
    forward = stage.forward_one_chunk

    def forward_recorded(*args: Any, **kwargs: Any) -> Any:
        with meter.recording(index):
            return forward(*args, **kwargs)

    stage.forward_one_chunk = timer.wrap(index, forward_recorded)  # type: ignore[method-assign]
    stage.backward_one_chunk = timer.wrap(index, stage.backward_one_chunk)  # type: ignore[method-assign]
    stage.backward_weight_one_chunk = timer.wrap(  # type: ignore[method-assign]
        index, stage.backward_weight_one_chunk
    )


def _notes(
    plan: Plan, opts: RunOptions, *, dtype: torch.dtype, ddp: bool, manual_dp: bool
) -> dict[str, str]:
    notes = {
        "dtype": str(dtype).removeprefix("torch."),
        "optimizer": opts.optimizer,
        "seed": str(opts.seed),
        "microbatches": str(plan.num_microbatches),
        "micro_batch_size": str(plan.micro_batch_size),
    }
    if plan.dp > 1:
        notes["data_parallel"] = (
            "fsdp2" if plan.zero_stage else "ddp" if ddp else "all-reduce after the step"
        )
    if plan.cp > 1:
        notes["context_parallel"] = f"cp={plan.cp}: ring attention over p2p, 2 chunks a rank"
    if plan.ep > 1:
        notes["expert_parallel"] = f"ep={plan.ep}, edp={plan.edp}: all-to-all dispatch/combine"
    return notes


def _print_summary(plan: Plan, report: object) -> None:
    from planner.runreport import RunReport

    assert isinstance(report, RunReport)
    pred = plan.prediction
    print(
        f"{plan.schedule} pp={plan.pp} dp={plan.dp} tp={plan.tp} vpp={plan.vpp}: "
        f"step {report.step_time_s * 1e3:.1f} ms (predicted {pred.step_time_s * 1e3:.1f}), "
        f"bubble {report.bubble_fraction:.3f} (predicted {pred.bubble_fraction:.3f}), "
        f"loss {report.loss if report.loss is not None else float('nan'):.4f}"
    )
    for s in report.stages:
        print(
            f"  stage {s.stage} rank {s.rank}: busy {s.busy_s * 1e3:.1f} ms, activations "
            f"{s.activation_bytes / 2**20:.2f} MiB, peak {s.peak_memory_bytes / 2**20:.2f} MiB"
        )
    spread = max(report.step_times_s) - min(report.step_times_s)
    print(
        f"  step time spread (max - min) {spread * 1e3:.1f} ms over {report.steps} steps; "
        f"median {statistics.median(report.step_times_s) * 1e3:.1f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    exit_rank(main())
