"""Plans the planner itself emits for framework `meshplan`, from random tiny requests.

A `Case` pins what the property test varies (model, degrees, schedule, vpp, micro-batches,
ZeRO, sequence parallel, a memory cap that forces recompute); `emitted_plan` asks the
planner's public search for the best plan under those constraints with
`constraints.framework = "meshplan"`, and `check_case` runs that plan in the reference runner
(2 steps, gloo) and compares both steps' gradients with one process. Used by
`tests/profiler/test_runner_property.py` (a fixed handful) and `bench/runner_property.py`
(random cases, with the pass count).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from run_plan_support import SEQ, assert_same_grads, run_forked, run_torchrun

from planner.errors import InfeasibleError
from planner.plan import Plan
from planner.search import search
from planner.specs.base import SCHEDULES, ScheduleName
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelArch
from planner.specs.request import Constraints, PlanRequest, SearchOptions
from planner.specs.training import TrainingSpec

__all__ = ["Case", "check_case", "emitted_plan", "random_case"]

Launcher = Literal["forked", "torchrun"]


@dataclass(frozen=True)
class Case:
    """One request to plan: everything the search may choose is pinned but the stage split
    and the per-layer recompute. `memory_fraction`: plan again under a cap of this fraction
    of the uncapped plan's peak memory (the search then recomputes some layers)."""

    family: Literal["gpt", "llama"]
    num_layers: int
    hidden_size: int
    schedule: ScheduleName
    pp: int
    dp: int
    tp: int
    vpp: int
    micro_batch_size: int
    microbatches: int
    zero_stage: int
    sequence_parallel: bool
    memory_fraction: float | None = None

    @property
    def ranks(self) -> int:
        return self.pp * self.dp * self.tp

    def arch(self) -> ModelArch:
        h = self.hidden_size
        if self.family == "gpt":
            return ModelArch(
                family="gpt", name="prop-gpt", num_layers=self.num_layers, hidden_size=h,
                num_attention_heads=4, vocab_size=96,
            )  # fmt: skip
        return ModelArch(
            family="llama", name="prop-llama", num_layers=self.num_layers, hidden_size=h,
            num_attention_heads=4, num_kv_heads=2, ffn_hidden_size=2 * h, vocab_size=96,
        )  # fmt: skip

    def describe(self) -> str:
        text = (
            f"{self.family} L{self.num_layers} h{self.hidden_size} {self.schedule} "
            f"pp{self.pp} dp{self.dp} tp{self.tp} vpp{self.vpp} mbs{self.micro_batch_size} "
            f"m{self.microbatches} zero{self.zero_stage}"
        )
        if self.tp > 1:
            text += " sp" if self.sequence_parallel else " no-sp"
        if self.memory_fraction is not None:
            text += f" cap{self.memory_fraction:.2f}"
        return text


def _request(case: Case, *, memory_cap_gib: float | None = None) -> PlanRequest:
    c = case
    return PlanRequest(
        model=c.arch(),
        cluster=ClusterSpec(gpu="CPU", num_gpus=c.ranks),
        training=TrainingSpec(
            global_batch_size=c.dp * c.micro_batch_size * c.microbatches,
            seq_length=SEQ,
            dtype="fp32",
        ),
        constraints=Constraints(
            framework="meshplan",
            schedules=(c.schedule,),
            pp=(c.pp,),
            dp=(c.dp,),
            tp=(c.tp,),
            vpp=(c.vpp,),
            micro_batch_sizes=(c.micro_batch_size,),
            zero_stages=(c.zero_stage,),
            sequence_parallel=c.sequence_parallel if c.tp > 1 else None,
            memory_cap_gib=memory_cap_gib,
            memory_reserve_gib=0.0,
        ),
        search=SearchOptions(time_limit_s=10.0, top_k=0),
    )


def emitted_plan(case: Case) -> Plan | None:
    """The search's plan for the case (framework meshplan), or None when it emits none."""
    try:
        plan = search(_request(case)).plan
    except InfeasibleError:
        return None
    if case.memory_fraction is None:
        return plan
    cap_gib = case.memory_fraction * plan.prediction.peak_memory_bytes / 2**30
    try:
        return search(_request(case, memory_cap_gib=cap_gib)).plan
    except InfeasibleError:
        return plan  # no recompute mix fits under that cap: the uncapped plan stands


def random_case(rng: random.Random) -> Case:
    """A random case on 2-4 ranks; the degrees and vpp stay inside what the search allows."""
    while True:
        tp = rng.choice((1, 2))
        pp = rng.choice((1, 2, 3, 4))
        dp = rng.choice((1, 2))
        if 2 <= pp * dp * tp <= 4:
            break
    schedules = [s for s in SCHEDULES if pp > 1 or s in ("gpipe", "1f1b", "zb-h1")]
    schedule: ScheduleName = rng.choice(schedules)
    num_layers = rng.randint(max(2, 2 * pp - 1), 2 * pp + 3)
    profile_layers = num_layers + 2  # embedding, decoder blocks, head
    vpp = 1
    if schedule == "zbv":
        vpp = 2
    elif schedule == "interleaved-1f1b":
        vpp = rng.randint(2, max(2, min(4, profile_layers // pp)))
    m = rng.choice(sorted({max(1, pp - 1), pp, pp + 1, 2 * pp, 2 * pp + 1}))
    if schedule == "interleaved-1f1b" and m % max(1, m // pp):
        m = pp
    zeros = [0, 1, 3] if pp == 1 else [0, 1]
    return Case(
        family=rng.choice(("gpt", "llama")),
        num_layers=num_layers,
        hidden_size=rng.choice((32, 64)),
        schedule=schedule,
        pp=pp,
        dp=dp,
        tp=tp,
        vpp=vpp,
        micro_batch_size=rng.choice((1, 2)),
        microbatches=m,
        zero_stage=rng.choice(zeros) if dp > 1 else 0,
        sequence_parallel=rng.random() < 0.7,
        memory_fraction=rng.choice((None, None, rng.uniform(0.55, 0.95))),
    )


def check_case(
    plan: Plan, tmp: Path, *, launcher: Launcher = "forked", torchrun_args: tuple[str, ...] = ()
) -> int:
    """Run the plan (2 steps, `--optimizer sgd`) and compare both steps' gradients with one
    process; returns the steps compared. Raises AssertionError on a crash or a mismatch."""
    if launcher == "torchrun":
        grads = run_torchrun(plan, tmp, torchrun_args=torchrun_args)
    else:
        grads = run_forked(plan, tmp)
    return assert_same_grads(plan, grads)
