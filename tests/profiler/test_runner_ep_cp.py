"""Expert and context parallelism of the reference runner: gradients equal one process's.

Real processes on gloo (CPU, fp32), forked from a server that imported torch once. Each run
does one forward and backward of a fixed batch and dumps every gradient; the reference is the
plain model on the whole batch in this process. Tolerance rtol=1e-4, atol=1e-5 as the other
runner tests.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from run_plan_support import free_port
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from planner.specs.model import ModelArch
from profiler.models import build_model, tiny_arch, tiny_moe_arch
from profiler.runner.context import apply_context_parallel, chunk_positions, shard_sequence
from profiler.runner.context import sync_grads as cp_sync_grads
from profiler.runner.expert import ExpertParallel, apply_expert_parallel
from profiler.runner.split import StageModule, canonical_name, stage_loss

SEQ = 16
BATCH = 4
RTOL, ATOL = 1e-4, 1e-5


def _batch(arch: ModelArch) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(arch.vocab_size, (BATCH, SEQ), generator=gen)
    return tokens, torch.randint(arch.vocab_size, (BATCH, SEQ), generator=gen)


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        canonical_name(n): p.grad.detach().clone()
        for n, p in module.named_parameters()
        if p.grad is not None
    }


def _ep(arch: ModelArch, rank: int, world: int) -> dict[str, torch.Tensor]:
    """ep = world over one data-parallel group: each rank routes BATCH / ep sequences."""
    model = build_model(arch, seq_length=SEQ, seed=0)
    apply_expert_parallel(model, dist.group.WORLD)
    tokens, labels = _batch(arch)
    rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    model(tokens[rows], labels[rows]).backward()
    ExpertParallel(dense_group=dist.group.WORLD).sync_grads([model])
    return _grads(model)


def _ep_edp(arch: ModelArch, rank: int, world: int) -> dict[str, torch.Tensor]:
    """ep = 2 and edp = world / 2: experts sharded over ep, replicated over edp."""
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("edp", "ep"))
    model = build_model(arch, seq_length=SEQ, seed=0)
    apply_expert_parallel(model, mesh["ep"].get_group())
    tokens, labels = _batch(arch)
    rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    model(tokens[rows], labels[rows]).backward()
    ExpertParallel(dense_group=dist.group.WORLD, edp_group=mesh["edp"].get_group()).sync_grads(
        [model]
    )
    return _grads(model)


def _cp(arch: ModelArch, rank: int, world: int) -> dict[str, torch.Tensor]:
    """cp = world: every rank holds 2 of the 2cp chunks of every sequence."""
    model = build_model(arch, seq_length=SEQ, seed=0)
    apply_context_parallel(model, dist.group.WORLD, seq_length=SEQ)
    tokens, labels = _batch(arch)
    local = shard_sequence(tokens, cp=world, rank=rank), shard_sequence(labels, cp=world, rank=rank)
    model(*local).backward()
    cp_sync_grads([model], dist.group.WORLD)
    return _grads(model)


def _ep_pp(arch: ModelArch, rank: int, world: int) -> dict[str, torch.Tensor]:
    """pp = 2 (GPipe, 2 micro-batches, torch.distributed.pipelining) x ep = 2."""
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("pp", "ep"))
    pp_rank, ep_rank = mesh["pp"].get_local_rank(), mesh["ep"].get_local_rank()
    model = build_model(arch, seq_length=SEQ, seed=0)
    half = arch.num_layers // 2
    first = pp_rank == 0
    blocks = range(half) if first else range(half, arch.num_layers)
    stage = StageModule(
        embedding=model.embedding if first else None,
        blocks={j: model.layers[j] for j in blocks},
        head=None if first else model.head,
    )
    apply_expert_parallel(stage, mesh["ep"].get_group())
    pipe = PipelineStage(stage, pp_rank, 2, torch.device("cpu"), group=mesh["pp"].get_group())
    schedule = ScheduleGPipe(pipe, 2, loss_fn=stage_loss)
    tokens, labels = _batch(arch)
    ep = world // 2
    rows = slice(ep_rank * BATCH // ep, (ep_rank + 1) * BATCH // ep)
    args = (tokens[rows],) if first else ()
    schedule.step(*args, target=labels[rows], return_outputs=False, labels=labels[rows])
    ExpertParallel(dense_group=mesh["ep"].get_group()).sync_grads([stage])
    return _grads(stage)


def _ep_cp(arch: ModelArch, rank: int, world: int) -> dict[str, torch.Tensor]:
    """cp = ep = world on the same ranks (MoE parallel folding: the expert layers' ep group is
    the attention's cp group): each rank routes its own chunks' tokens."""
    model = build_model(arch, seq_length=SEQ, seed=0)
    apply_context_parallel(model, dist.group.WORLD, seq_length=SEQ)
    apply_expert_parallel(model, dist.group.WORLD)
    tokens, labels = _batch(arch)
    local = shard_sequence(tokens, cp=world, rank=rank), shard_sequence(labels, cp=world, rank=rank)
    model(*local).backward()
    ExpertParallel(dense_group=dist.group.WORLD).sync_grads([model])
    return _grads(model)


MODES = {"ep": _ep, "ep_edp": _ep_edp, "cp": _cp, "ep_pp": _ep_pp, "ep_cp": _ep_cp}


def _worker(rank: int, world: int, port: int, mode: str, arch_json: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        grads = MODES[mode](ModelArch.model_validate_json(arch_json), rank, world)
        torch.save(grads, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _run(mode: str, arch: ModelArch, world: int, tmp: Path) -> list[dict[str, torch.Tensor]]:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "profiler.models"])
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(r, world, port, mode, arch.model_dump_json(), str(tmp)))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert codes == [0] * world, f"worker exit codes {codes} (None: timed out)"
    return [torch.load(tmp / f"rank{r}.pt") for r in range(world)]


def _reference(arch: ModelArch) -> dict[str, torch.Tensor]:
    model = build_model(arch, seq_length=SEQ, seed=0)
    model(*_batch(arch)).backward()
    return _grads(model)


def _assert_same(ranks: list[dict[str, torch.Tensor]], ref: dict[str, torch.Tensor]) -> None:
    seen: set[str] = set()
    for r, grads in enumerate(ranks):
        for name, g in grads.items():
            assert name in ref, f"rank {r}: {name} is not a parameter of the model"
            torch.testing.assert_close(
                g, ref[name], rtol=RTOL, atol=ATOL, msg=lambda m, n=name, k=r: f"rank {k} {n}: {m}"
            )
            seen.add(name)
    assert seen == set(ref), f"no rank has the gradients of {sorted(set(ref) - seen)}"


def test_ep2_gradients_equal_one_process(tmp_path: Path) -> None:
    arch = tiny_moe_arch()
    ranks = _run("ep", arch, 2, tmp_path)
    # each rank holds 2 of the 4 experts of every MoE layer
    assert "layers.1.mlp.experts.0.up_proj.weight" in ranks[0]
    assert "layers.1.mlp.experts.0.up_proj.weight" not in ranks[1]
    _assert_same(ranks, _reference(arch))


@pytest.mark.slow
def test_ep2_edp2_gradients_equal_one_process(tmp_path: Path) -> None:
    arch = tiny_moe_arch(shared=0)
    _assert_same(_run("ep_edp", arch, 4, tmp_path), _reference(arch))


@pytest.mark.parametrize(
    ("family", "cp"),
    [
        pytest.param("llama", 2, id="llama-cp2"),
        pytest.param("gpt", 2, id="gpt-cp2"),
        pytest.param("llama", 4, id="llama-cp4", marks=pytest.mark.slow),
    ],
)
def test_cp_gradients_equal_one_process(tmp_path: Path, family: str, cp: int) -> None:
    arch = tiny_arch(family, num_layers=2)  # type: ignore[arg-type]
    _assert_same(_run("cp", arch, cp, tmp_path), _reference(arch))


def test_ep2_folded_onto_cp2_gradients_equal_one_process(tmp_path: Path) -> None:
    arch = tiny_moe_arch()
    _assert_same(_run("ep_cp", arch, 2, tmp_path), _reference(arch))


def test_ep2_pp2_gradients_equal_one_process(tmp_path: Path) -> None:
    arch = tiny_moe_arch()
    _assert_same(_run("ep_pp", arch, 4, tmp_path), _reference(arch))


def test_chunks_balance_the_causal_work() -> None:
    cp, s = 4, 32
    held = [chunk_positions(s, cp=cp, rank=r) for r in range(cp)]
    assert sorted(torch.cat(held).tolist()) == list(range(s))
    # causal work of a query at position p is p + 1 keys: equal on every rank
    work = {int((pos + 1).sum()) for pos in held}
    assert len(work) == 1
    with pytest.raises(ValueError, match="seq_length=30 must be a multiple of 2 \\* cp = 8"):
        chunk_positions(30, cp=4, rank=0)
