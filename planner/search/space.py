"""The discrete search space: (tp, pp, dp), vpp, schedule, micro-batch size, ZeRO, sequence
parallel and the allowed recompute modes — every fixed choice except the stage partition.

Rules (issue 3; torch's schedule constraints from REFERENCE.md):
- tp * pp * dp = num_gpus; tp divides the attention and kv heads (when the shapes are known);
  tp stays inside a node unless constraints.tp_across_nodes; pp * vpp <= layers.
- gpipe, 1f1b, zb-h1: vpp = 1; interleaved-1f1b: pp >= 2, vpp >= 2 and
  m % max(1, m // pp) == 0; zbv: exactly vpp = 2. With pp = 1 the schedules coincide in time,
  so only one is kept (1f1b when allowed: it holds one micro-batch, GPipe holds m).
- micro-batch size divides global_batch / dp (m = global_batch / (dp * mbs)).
- ZeRO 0 or 1; 2 and 3 only with pp = 1 (DeepSpeed refuses ZeRO-2/3 with pipelining).
- sequence parallel whenever tp > 1 (same communication volume, less activation memory),
  unless constraints.sequence_parallel says otherwise or the framework cannot express it.
- recompute: per layer among the allowed modes; a single mode for all layers when
  constraints.uniform_recompute or the framework cannot mix modes (then one configuration per
  mode).
Every constraint of the request, and the framework's capabilities, narrow this space: the
capability table (planner.launch.capabilities) while enumerating, then
`planner.launch.unsupported` on each configuration (its stage split still open), so that every
configuration searched for a framework is one that framework can run.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost import PartitionInputs
from planner.launch.capabilities import FrameworkCaps, capabilities
from planner.launch.render import unsupported
from planner.search.model import StageSplit, layer_runs
from planner.specs.base import RECOMPUTE_MODES, SCHEDULES, RecomputeMode, ScheduleName
from planner.specs.request import Candidate, PlanRequest

Family = tuple[int, int, int, int, str, int, int]  # Config.family


@dataclass(frozen=True)
class Config:
    tp: int
    pp: int
    dp: int
    vpp: int
    schedule: ScheduleName
    micro_batch_size: int
    num_microbatches: int
    zero_stage: int
    sequence_parallel: bool
    modes: tuple[RecomputeMode, ...]  # allowed per-layer modes (one: uniform recompute)

    def candidate(self) -> Candidate:
        return Candidate(
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            vpp=self.vpp,
            schedule=self.schedule,
            micro_batch_size=self.micro_batch_size,
            zero_stage=self.zero_stage,
            sequence_parallel=self.sequence_parallel,
            recompute=self.modes[0] if len(self.modes) == 1 else "none",
        )

    @property
    def family(self) -> Family:
        """What alternatives must differ in: degrees, schedule, vpp, micro-batch size or ZeRO
        (not sequence parallelism or the recompute modes: those are how a plan fits)."""
        return (
            self.tp,
            self.pp,
            self.dp,
            self.vpp,
            self.schedule,
            self.micro_batch_size,
            self.zero_stage,
        )

    def describe(self) -> str:
        text = f"tp={self.tp} x pp={self.pp} x dp={self.dp}, {self.schedule}"
        if self.vpp > 1:
            text += f" vpp={self.vpp}"
        text += f", mbs={self.micro_batch_size} (m={self.num_microbatches})"
        if self.zero_stage:
            text += f", ZeRO-{self.zero_stage}"
        if len(self.modes) == 1:
            text += f", recompute {self.modes[0]}"
        return text


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def stage_split(request: PlanRequest) -> StageSplit:
    fw = request.constraints.framework
    return capabilities(fw).stage_split if fw is not None else "any"


def enumerate_configs(request: PlanRequest, *, num_layers: int) -> list[Config]:
    """Every configuration the request allows, in a fixed order."""
    cons, cluster = request.constraints, request.cluster
    caps = capabilities(cons.framework) if cons.framework is not None else None
    n, per_node = cluster.num_gpus, cluster.gpus_per_node
    b = request.training.global_batch_size
    heads = (request.arch.num_attention_heads, request.arch.kv_heads) if request.arch else None

    schedules = [s for s in SCHEDULES if cons.schedules is None or s in cons.schedules]
    if caps is not None:
        schedules = [s for s in schedules if s in caps.schedules]
    modes: tuple[RecomputeMode, ...] = tuple(
        m
        for m in RECOMPUTE_MODES
        if (cons.recompute is None or m in cons.recompute)
        and (caps is None or m in caps.recompute_modes)
    )
    uniform = cons.uniform_recompute or (caps is not None and not caps.per_layer_recompute)
    mode_sets = [(m,) for m in modes] if uniform else [modes]
    max_vpp = caps.max_vpp if caps is not None else num_layers

    out: list[Config] = []
    for tp in _divisors(n):
        if cons.tp is not None and tp not in cons.tp:
            continue
        if heads is not None and (heads[0] % tp or heads[1] % tp):
            continue
        if n > per_node and (tp > per_node or per_node % tp) and not cons.tp_across_nodes:
            continue
        sps = [False] if tp == 1 else _sequence_parallel(cons.sequence_parallel, caps)
        for pp in _divisors(n // tp):
            if pp > num_layers or (cons.pp is not None and pp not in cons.pp):
                continue
            dp = n // (tp * pp)
            if cons.dp is not None and dp not in cons.dp:
                continue
            if b % dp:
                continue
            zeros = [0, 1] + ([2, 3] if pp == 1 else [])
            if cons.zero_stages is not None:
                zeros = [z for z in zeros if z in cons.zero_stages]
            if caps is not None:
                allowed = caps.zero_stages if pp == 1 else caps.zero_stages_with_pp
                zeros = [z for z in zeros if z in allowed]
            for mbs in _divisors(b // dp):
                if cons.micro_batch_sizes is not None and mbs not in cons.micro_batch_sizes:
                    continue
                m = b // (dp * mbs)
                for sched, vpp in _schedule_vpps(schedules, pp, m, num_layers, max_vpp, cons.vpp):
                    for z in zeros:
                        for sp in sps:
                            for ms in mode_sets:
                                out.append(Config(tp, pp, dp, vpp, sched, mbs, m, z, sp, ms))
    if cons.framework is None:
        return out
    return [c for c in out if not _unsupported(request, c)]


def _sequence_parallel(wanted: bool | None, caps: FrameworkCaps | None) -> list[bool]:
    """The sequence-parallel choice for tp > 1: on unless asked off or not expressible."""
    if caps is not None and not caps.sequence_parallel:
        return [] if wanted else [False]
    return [wanted is not False]


def _unsupported(request: PlanRequest, config: Config) -> list[str]:
    """What the request's framework finds against `config` (stage split still open)."""
    fw = request.constraints.framework
    assert fw is not None
    return unsupported(
        config.candidate(),
        fw,
        arch=request.arch,
        global_batch_size=request.training.global_batch_size,
        seq_length=request.training.seq_length,
    )


def _schedule_vpps(
    schedules: list[ScheduleName],
    pp: int,
    m: int,
    num_layers: int,
    max_vpp: int,
    vpp_allowed: tuple[int, ...] | None,
) -> list[tuple[ScheduleName, int]]:
    def ok(v: int) -> bool:
        return pp * v <= num_layers and v <= max_vpp and (vpp_allowed is None or v in vpp_allowed)

    out: list[tuple[ScheduleName, int]] = []
    if pp == 1:
        flat = [s for s in ("1f1b", "zb-h1", "gpipe") if s in schedules]
        return [(flat[0], 1)] if flat and ok(1) else []
    for s in schedules:
        if s in ("gpipe", "1f1b", "zb-h1"):
            if ok(1):
                out.append((s, 1))
        elif s == "zbv":
            if ok(2):
                out.append((s, 2))
        elif m % max(1, m // pp) == 0:
            out.extend((s, v) for v in range(2, num_layers // pp + 1) if ok(v))
    return out


def split_ok(bounds: tuple[int, ...], split: StageSplit, main: range) -> bool:
    """Whether stage `bounds` keep a framework's stage split (`stage_split`): "first_last",
    equal middle stages; "uniform", equal counts of the `main` run's layers per stage."""
    sizes = [bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)]
    if split == "first_last":
        return len(set(sizes[1:-1])) <= 1
    if split == "uniform":
        counts = {
            len(range(max(bounds[i], main.start), min(bounds[i + 1], main.stop)))
            for i in range(len(sizes))
        }
        return len(counts) <= 1
    return True


def main_run(inputs: PartitionInputs) -> range:
    """The layers of the largest run of identical layers (a GPT's decoder blocks)."""
    run = max(layer_runs(inputs), key=lambda r: r.count)
    return range(run.first, run.first + run.count)
