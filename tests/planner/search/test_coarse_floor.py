"""The coarse floors (kinds.coarse_work per (tp, mbs, sp, cp), sweep_floors.coarse_floor per group)
are never above what they stand for: every work kind under the key (brute force over small
MoE and cp requests, and a sample of the bench's MoE requests), every member's own time
floor from its PartitionInputs, and, in a search cut short, the bound it states is at most
the exhaustive oracle's optimum."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from planner.catalog.decoder_kinds import layer_shape
from planner.catalog.hardware import GpuSpec
from planner.catalog.layer_work import Shape
from planner.catalog.moe_work import (
    DEFAULT_ROUTING,
    expert_floor_parts,
    expert_parts,
    expert_shape,
)
from planner.cost import partition_inputs, resolve_costs
from planner.cost.folded import cp_times
from planner.errors import SpecError
from planner.search.bounds import restricted, time_floor_s
from planner.search.driver import run_search
from planner.search.exact import REL_TOL
from planner.search.kinds import (
    coarse_key,
    coarse_work,
    kind_key,
    kind_layer_costs,
    kind_links,
    kind_work,
)
from planner.search.outcome import Outcome
from planner.search.progress import SearchProgress
from planner.search.space import Config, enumerate_configs
from planner.search.sweep_floors import coarse_floor
from planner.specs import PlanRequest

from .random_folded import random_folded_request
from .random_requests import solve_in_mode

CASES = Path(__file__).resolve().parents[3] / "bench" / "cases"


def _configs(request: PlanRequest) -> list[Config]:
    src = resolve_costs(request)
    return enumerate_configs(request, num_layers=len(src.layers))


def _check_kinds(request: PlanRequest, limit: int | None = None) -> int:
    """coarse_work <= kind_work on every kind (or a sample of `limit`); returns how many."""
    src = resolve_costs(request)
    kinds: dict[object, Config] = {}
    for cfg in _configs(request):
        kinds.setdefault(kind_key(cfg), cfg)
    sample = list(kinds.values())
    if limit is not None:
        random.Random(1).shuffle(sample)
        sample = sample[:limit]
    compared = 0
    for cfg in sample:
        try:
            w, c = kind_work(request, src, cfg)
        except (SpecError, ValueError):
            continue
        wc, cc = coarse_work(request, src, coarse_key(cfg))
        assert 0.0 < wc <= w and 0.0 < cc <= c, (cfg.describe(), wc, w, cc, c)
        compared += 1
    return compared


@pytest.mark.parametrize("kind", ["moe", "cp"])
def test_coarse_work_is_at_most_every_kind_under_it(kind: str) -> None:
    compared = sum(
        _check_kinds(random_folded_request(random.Random(f"coarse-{kind}-{i}"), kind))
        for i in range(10)
    )
    assert compared >= 100


@pytest.mark.parametrize(
    "name",
    ["moe-deepseek-v3-2048xh100", "moe-mixtral-8x7b-64xh100", "moe-qwen3-235b-a22b-256xh100"],
)
def test_coarse_work_is_at_most_the_bench_kinds(name: str) -> None:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    assert _check_kinds(request, 150) >= 100


def _least_kinds(request: PlanRequest) -> tuple[int, int]:
    """On a dense request, coarse_work equals the least kind_work under its key (W and C):
    the key's kinds differ only in split backward and cp_comm, and the coarse floor takes
    each cp_comm's exact K/V exchange at the key's cp links. Returns (keys with cp > 1,
    of them with a kind whose K/V exchange takes time: dropped, it fails there)."""
    src = resolve_costs(request)
    least: dict[object, list[float]] = {}
    exchanged: set[object] = set()
    for cfg in _configs(request):
        if cfg.cp == 1:
            continue
        try:
            w, c = kind_work(request, src, cfg)
        except (SpecError, ValueError):
            continue
        best = least.setdefault(coarse_key(cfg), [math.inf, math.inf])
        best[0], best[1] = min(best[0], w), min(best[1], c)
        _, folded = kind_links(request, src, cfg)
        assert folded is not None
        if any(sum(cp_times(cost, folded)) > 0 for cost in kind_layer_costs(src, cfg)):
            exchanged.add(coarse_key(cfg))
    for key, (w, c) in least.items():
        wc, cc = coarse_work(request, src, key)  # type: ignore[arg-type]
        assert math.isclose(wc, w, rel_tol=1e-12) and math.isclose(cc, c, rel_tol=1e-12), (
            key,
            wc,
            w,
            cc,
            c,
        )
    return len(least), len(exchanged)


@pytest.mark.parametrize(
    ("name", "exchanging"),
    # at 128K Megatron-Core's ring hides its exchange under the attention; torch's does not
    [("cp-llama3.1-8b-32k-8xh100-torchtitan", 1), ("cp-llama3.1-8b-128k-8xh100", 0)],
)
def test_coarse_work_is_the_least_kind_on_dense_cp_requests(name: str, exchanging: int) -> None:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    keys, exposed = _least_kinds(request)
    assert keys >= 4 and exposed >= exchanging, (keys, exposed)


def test_coarse_work_is_the_least_kind_on_random_cp_requests() -> None:
    keys = exposed = 0
    for i in range(10):
        a, b = _least_kinds(random_folded_request(random.Random(f"coarse-least-{i}"), "cp"))
        keys, exposed = keys + a, exposed + b
    assert keys >= 20 and exposed >= 5, (keys, exposed)


def test_expert_floor_parts_are_at_most_every_ep_and_etp() -> None:
    request = random_folded_request(random.Random("coarse-parts"), "moe")
    arch = request.arch
    assert arch is not None and arch.moe is not None
    gpu: GpuSpec = request.cluster.device
    from planner.catalog.efficiency import DEFAULT_EFFICIENCY as eff

    index = next(i for i in range(arch.num_layers) if arch.is_moe_layer(i))
    experts = arch.moe.num_experts
    for tokens in (1, 7, 512, 8192, 65536):
        x = Shape(
            b=1,
            s=tokens,
            h=arch.hidden_size,
            a=arch.num_attention_heads,
            kv=arch.kv_heads,
            f=arch.ffn,
            v=arch.vocab_size,
            t=1,
            q=1,
            d=2,
        )
        lx = layer_shape(arch, index, x)

        def shape(ep: int, etp: int, lx: Shape = lx) -> object:
            return expert_shape(
                arch.moe,  # type: ignore[arg-type]
                tokens=lx.tokens,
                tp=1,
                ep=ep,
                etp=etp,
                gated=arch.family == "llama",
                routing=DEFAULT_ROUTING,
            )

        floor = expert_floor_parts(lx, shape(1, 1), gpu, eff)  # type: ignore[arg-type]
        assert all(p.fw_s > 0 for p in floor)
        for ep in (e for e in range(1, experts + 1) if experts % e == 0):
            for etp in (1, 2, 4, 8):
                real = expert_parts(lx, shape(ep, etp), gpu, eff)  # type: ignore[arg-type]
                same = expert_floor_parts(lx, shape(ep, etp), gpu, eff)  # type: ignore[arg-type]
                for f, r, s in zip(floor, real, same, strict=True):
                    assert f.kind == r.kind
                    for field in ("fw_s", "bw_input_s", "bw_weight_s"):
                        assert getattr(f, field) <= getattr(r, field), (tokens, ep, etp, f, r)
                        # the floor reads only what ep and etp leave unchanged
                        assert getattr(s, field) == pytest.approx(getattr(f, field), rel=1e-12)


def test_the_group_floor_is_at_most_every_member_floor() -> None:
    compared = 0
    for i in range(6):
        request = random_folded_request(random.Random(f"coarse-group-{i}"), "moe")
        src = resolve_costs(request)
        out = Outcome(entries=[], best=None, status="OPTIMAL", source=src)
        for cfg in _configs(request):
            try:
                inputs = partition_inputs(request, cfg.candidate(), source=src)
            except SpecError:
                continue
            floor = coarse_floor(request, src, out, [cfg])
            assert floor is not None
            exact = time_floor_s(restricted(inputs, cfg.modes))
            assert floor <= exact, (cfg.describe(), floor, exact)
            compared += 1
    assert compared >= 200


class StepClock:
    """Each read is `step` seconds after the last: a search's progress in clock reads, the
    same on any machine."""

    def __init__(self, step: float) -> None:
        self.step, self.now = step, 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_search_cut_short_states_a_bound_at_most_the_optimum() -> None:
    cut = stated = bounded = 0
    for i in range(12):
        request = random_folded_request(random.Random(f"coarse-cut-{i}"), "moe")
        short = request.model_copy(
            update={"search": request.search.model_copy(update={"time_limit_s": 1.0})}
        )
        reports: list[SearchProgress] = []
        out = run_search(short, clock=StepClock(5e-3), on_progress=reports.append)
        oracle = solve_in_mode(request, "exhaustive")
        if out.best is None:
            assert oracle is None or out.pending
            continue
        assert oracle is not None
        optimum = oracle.plan.prediction.step_time_s
        assert out.lower_bound_s is not None
        assert out.lower_bound_s <= optimum * (1 + 1e-9), (i, out.lower_bound_s, optimum)
        # the reports' bounds (kept scans of the unswept groups, out.pending_scan) too
        for r in reports:
            assert r.lower_bound_s is None or r.lower_bound_s <= optimum * (1 + 1e-9)
        bounded += any(r.lower_bound_s is not None for r in reports[:-1])
        incumbent = out.best[1].score.step_time_s
        src = out.source
        assert src is not None
        for members in out.pending:  # what reaches the incumbent is pruned, not left open
            floor = coarse_floor(short, src, out, members, known=True)
            assert floor is None or floor < incumbent * (1 - REL_TOL)
        if out.pending:
            cut += 1
            stated += out.gap is not None and math.isfinite(out.gap)
    assert cut >= 2, "the clock must cut some searches short for this test to mean anything"
    assert stated == cut  # every unswept group had a positive floor
    assert bounded >= cut  # and the reports before the last state a bound
