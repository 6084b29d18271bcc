"""The discrete search space: (tp, cp, pp, dp), the expert degrees (ep, etp), cp's K/V
exchange, vpp, schedule, micro-batch size, ZeRO, sequence parallel and the allowed recompute
modes — every fixed choice except the stage partition.

Rules (issue 3; torch's schedule constraints from REFERENCE.md; issue 19 and docs/moe.md for
cp, ep and etp):
- tp * cp * pp * dp = num_gpus; tp divides the attention and kv heads (when the shapes are
  known); tp stays inside a node unless constraints.tp_across_nodes; pp * vpp <= layers.
- cp: seq_length % (2 cp) == 0 (each rank holds 2 of 2 cp load-balanced causal chunks;
  Megatron's validate_args) and each chunk at least SPACE.min_cp_chunk_tokens long (below,
  see SpaceRules); with cp > 1 one configuration per allowed K/V exchange
  (cp_comm, `p2p` ring or `all_gather`): the cost model prices both, the search keeps the
  faster. cp may span nodes (Llama 3 405B: TP8 fills the node, CP16 crosses it).
- cp stays 1 for a model whose attention core is unfused (gpt's default, Megatron-LM 2021:
  Megatron-Core runs context parallelism through Transformer Engine's fused attention only).
- cp, ep and etp stay 1 for a model given by a measured profile (measured at cp = ep =
  etp = 1; planner.cost.resolve_costs refuses to scale it).
- ep, etp (MoE models only, else 1): ep divides num_experts, etp * ep divides tp * cp * dp
  (Megatron-Core's folding: the expert grid etp x ep x edp tiles the attention grid's
  tp x cp x dp GPUs), etp divides moe_ffn_hidden_size (each expert's FFN is split over etp
  as the dense one is over tp). The rule adopted for where the groups sit, after
  Megatron-Core's guidance (../shared/cases/moe_cp.json `facts`: ETP = 1 for fine-grained
  MoE, EP x TP inside NVLink, PP across nodes): etp follows tp's rule (inside a node unless
  constraints.tp_across_nodes: its collectives are per layer on the critical path as tp's
  are) and, unless constraints.etp lists values, divides tp (Megatron-Core's default is
  etp = tp and its guidance lowers it, never raises it). ep may span nodes: the cost model
  prices dispatch and combine on the link the ep group spans (NVLink inside a node, the
  network across), which is what "EP inside NVLink" is about, and DeepSeek-V3 trains with
  EP64 over 8 nodes.
Configurations that another one dominates (every per-layer time and byte count at most its
own: e.g. cp = c at micro-batch b against cp = c / g, dp g at b / g, which hold the same
tokens per GPU and micro-batch and the same m) are not dropped here: the cost model decides
whether they are (planner.search.dominance.mark_dominated compares their PartitionInputs).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, get_args

from planner.cost import PartitionInputs
from planner.launch.capabilities import FrameworkCaps, capabilities
from planner.launch.layers import LaunchView
from planner.launch.render import view_unsupported
from planner.search.model import StageSplit, layer_runs
from planner.specs.base import RECOMPUTE_MODES, SCHEDULES, CpComm, RecomputeMode, ScheduleName
from planner.specs.model import ModelArch
from planner.specs.request import Candidate, Constraints, PlanRequest, StageSpec

CP_COMMS: tuple[CpComm, ...] = get_args(CpComm)

Family = tuple[int, int, int, int, int, int, int, str, int, int]  # Config.family


class Config(NamedTuple):
    """One configuration (a NamedTuple: millions are built for a large request, at a tenth of
    a frozen dataclass's cost each; immutable and compared by value all the same)."""

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
    cp: int = 1
    cp_comm: CpComm = "p2p"
    ep: int = 1
    etp: int = 1

    def candidate(
        self,
        *,
        recompute: RecomputeMode | None = None,
        stages: tuple[StageSpec, ...] | None = None,
    ) -> Candidate:
        """The Candidate of this configuration; `recompute` (default: the single mode, or
        "none" with several) and `stages` for a solved one."""
        if recompute is None:
            recompute = self.modes[0] if len(self.modes) == 1 else "none"
        return Candidate(
            tp=self.tp,
            cp=self.cp,
            cp_comm=self.cp_comm,
            ep=self.ep,
            etp=self.etp,
            pp=self.pp,
            dp=self.dp,
            vpp=self.vpp,
            schedule=self.schedule,
            micro_batch_size=self.micro_batch_size,
            zero_stage=self.zero_stage,
            sequence_parallel=self.sequence_parallel,
            recompute=recompute,
            stages=stages,
        )

    @property
    def family(self) -> Family:
        """What alternatives must differ in: degrees (tp, cp, pp, dp, ep, etp), schedule, vpp,
        micro-batch size or ZeRO (not sequence parallelism, cp's K/V exchange or the recompute
        modes: those are how a plan runs or fits)."""
        return (
            self.tp,
            self.cp,
            self.pp,
            self.dp,
            self.ep,
            self.etp,
            self.vpp,
            self.schedule,
            self.micro_batch_size,
            self.zero_stage,
        )

    def degrees(self) -> str:
        """The degrees in words: "tp=2 x pp=4 x dp=8", with cp, ep and etp where above 1."""
        cp = f" x cp={self.cp}" if self.cp > 1 else ""
        text = f"tp={self.tp}{cp} x pp={self.pp} x dp={self.dp}"
        if self.ep > 1 or self.etp > 1:
            edp = self.tp * self.cp * self.dp // (self.ep * self.etp)
            text += f" (experts: etp={self.etp} x ep={self.ep} x edp={edp})"
        return text

    def describe(self) -> str:
        text = f"{self.degrees()}, {self.schedule}"
        if self.vpp > 1:
            text += f" vpp={self.vpp}"
        text += f", mbs={self.micro_batch_size} (m={self.num_microbatches})"
        if self.cp > 1:
            text += f", cp K/V by {self.cp_comm}"
        if self.zero_stage:
            text += f", ZeRO-{self.zero_stage}"
        if len(self.modes) == 1:
            text += f", recompute {self.modes[0]}"
        return text


@dataclass(frozen=True)
class SpaceRules:
    """What the enumeration leaves out on physical grounds, beyond the frameworks' rules.

    min_cp_chunk_tokens: the shortest chunk (seq_length / (2 cp) tokens) context parallelism
    may cut. Flash attention works on tiles of 64-128 query rows and 64-128 keys
    (FlashAttention-2, Dao 2023, §3.3: block sizes {64, 128} x {64, 128}); a chunk shorter
    than a tile pays a tile's work for fewer rows at every ring step, while halving cp and
    doubling dp (same GPUs, same tokens per GPU) keeps the tiles full and sends K/V fewer
    times. 64, the smaller tile, so no chunk a kernel fills is left out. Without it a 4K
    sequence would be searched up to cp = 2048 (one token per chunk).
    """

    min_cp_chunk_tokens: int = 64


SPACE = SpaceRules()


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def stage_split(request: PlanRequest) -> StageSplit:
    fw = request.constraints.framework
    return capabilities(fw).stage_split if fw is not None else "any"


def enumerate_configs(request: PlanRequest, *, num_layers: int) -> list[Config]:
    """Every configuration the request allows, in a fixed order: per (tp, cp, pp, dp, mbs),
    schedule and vpp outermost, then ZeRO, sp, (ep, etp), cp_comm and recompute modes."""
    with no_gc():
        check = framework_checker(request) if request.constraints.framework is not None else None
        out: list[Config] = []
        for groups in _blocks(request, num_layers):
            flat = itertools.chain.from_iterable(zip(*groups, strict=True))
            out.extend(flat if check is None else (c for c in flat if not check(c)))
        return out


def enumerate_groups(request: PlanRequest, *, num_layers: int) -> list[list[Config]]:
    """enumerate_configs' configurations grouped as the sweep groups them (the same degrees,
    micro-batch size, ZeRO, cp_comm, ep, etp, sp and recompute modes: they differ in schedule
    and vpp alone), in the order each group's first member comes in enumerate_configs, each
    group's members in that order too: enumerate_configs grouped by those fields in
    first-seen order, built without a dictionary over every configuration (3,296,816 on
    DeepSeek-V3 on 2,048 GPUs). Within one (tp, cp, pp, dp, mbs) every group holds one
    member per (schedule, vpp) of that block before a framework's check; enumerate_configs
    takes them schedule first, so a group whose first members the check drops comes later,
    at its first kept member's schedule."""
    with no_gc():
        check = framework_checker(request) if request.constraints.framework is not None else None
        out: list[list[Config]] = []
        for groups in _blocks(request, num_layers):
            if check is None:
                out.extend(groups)
                continue
            kept = []
            for g in groups:
                members = [c for c in g if not check(c)]
                if members:
                    kept.append((g.index(members[0]), members))
            kept.sort(key=operator.itemgetter(0))  # stable: ties keep the product's order
            out.extend(members for _, members in kept)
        return out


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off while configurations (or a key per sweep group:
    sweep_floors.sweep_order) are built: they make no reference cycles, and each collection would
    scan every object built so far, which on a large MoE request (millions of
    configurations) costs more than building them. Cycles made meanwhile are collected
    after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def frozen_for_gc() -> Iterator[None]:
    """Every object alive now (the enumerated configurations above all) left out of the
    cyclic garbage collector's scans until the block ends (gc.freeze): a Config is a tuple
    subclass, which the collector never untracks as it does plain tuples of atoms, so each
    full collection during a search scanned every configuration again (DeepSeek-V3 on 2,048
    GPUs: 3,296,816). They become collectable again afterwards (gc.unfreeze)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def freeze_alive() -> None:
    """Inside frozen_for_gc's block: every object alive now joins the frozen ones (gc.freeze
    again), and leaves the collector's scans until the block ends, as they do. For a phase
    that allocates many objects after a long search built many more (the close of a search
    with hundreds of thousands of unswept groups): each full collection it triggers would
    scan them all. Objects freed meanwhile are still freed by their reference counts."""
    gc.freeze()


def _blocks(request: PlanRequest, num_layers: int) -> Iterator[list[list[Config]]]:
    """Per (tp, cp, pp, dp, mbs) the request allows, its groups before the framework's
    check: one per (ZeRO, sp, (ep, etp), cp_comm, modes) in that nested-loop order, each
    with one member per (schedule, vpp) in _schedule_vpps' order."""
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
    comms = _cp_comms(cons, caps)
    analytic = isinstance(request.model, ModelArch)  # a profile holds cp = ep = etp = 1
    # context parallelism runs attention as a fused kernel (planner.cost.candidate)
    fused = analytic and request.arch is not None and request.arch.fused_attention

    make = tuple.__new__
    for tp in _divisors(n):
        if cons.tp is not None and tp not in cons.tp:
            continue
        if heads is not None and (heads[0] % tp or heads[1] % tp):
            continue
        if not _in_node(tp, n, per_node, cons):
            continue
        sps = [False] if tp == 1 else _sequence_parallel(cons.sequence_parallel, caps)
        for cp in _cps(n // tp, request.training.seq_length, cons, bool(comms) and fused):
            for pp in _divisors(n // (tp * cp)):
                if pp > num_layers or (cons.pp is not None and pp not in cons.pp):
                    continue
                dp = n // (tp * cp * pp)
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
                arch = request.arch if analytic else None
                experts = _expert_degrees(arch, tp, tp * cp * dp, n, per_node, cons, caps)
                cp_comms = comms if cp > 1 else ("p2p",)
                for mbs in _divisors(b // dp):
                    if cons.micro_batch_sizes is not None and mbs not in cons.micro_batch_sizes:
                        continue
                    m = b // (dp * mbs)
                    scheds = _schedule_vpps(schedules, pp, m, num_layers, max_vpp, cons.vpp)
                    if not scheds:
                        continue
                    # tuple.__new__ with every one of Config's fields in order (tested;
                    # NamedTuple's own __new__ binds keywords, three times the cost)
                    yield [
                        [
                            make(
                                Config, (tp, pp, dp, vpp, sched, mbs, m, z, sp, ms, cp, cc, ep, etp)
                            )
                            for sched, vpp in scheds
                        ]
                        for z, sp, (ep, etp), cc, ms in itertools.product(
                            zeros, sps, experts, cp_comms, mode_sets
                        )
                    ]


def _in_node(degree: int, n: int, per_node: int, cons: Constraints) -> bool:
    """A tensor-parallel group (tp, or etp) of `degree` consecutive ranks inside one node."""
    return n <= per_node or cons.tp_across_nodes or (degree <= per_node and per_node % degree == 0)


def cp_comms(request: PlanRequest) -> tuple[CpComm, ...]:
    """The K/V exchanges the request's configurations of cp > 1 may use (_cp_comms)."""
    cons = request.constraints
    caps = capabilities(cons.framework) if cons.framework is not None else None
    return _cp_comms(cons, caps)


def _cp_comms(cons: Constraints, caps: FrameworkCaps | None) -> tuple[CpComm, ...]:
    """The K/V exchanges cp > 1 may use: the constraint's, narrowed by the framework's."""
    return tuple(
        c
        for c in CP_COMMS
        if (cons.cp_comm is None or c in cons.cp_comm) and (caps is None or c in caps.cp_comm)
    )


def _cps(rest: int, seq_length: int, cons: Constraints, exchange: bool) -> list[int]:
    """cp degrees dividing `rest` = num_gpus / tp: 2 cp equal chunks of the sequence of at
    least SPACE.min_cp_chunk_tokens, allowed by constraints.cp, and above 1 only with a K/V
    exchange the framework has."""
    return [
        c
        for c in _divisors(rest)
        if (cons.cp is None or c in cons.cp)
        and (
            c == 1
            or (
                exchange
                and seq_length % (2 * c) == 0
                and seq_length // (2 * c) >= SPACE.min_cp_chunk_tokens
            )
        )
    ]


def _expert_degrees(
    arch: ModelArch | None,
    tp: int,
    dense: int,
    n: int,
    per_node: int,
    cons: Constraints,
    caps: FrameworkCaps | None,
) -> list[tuple[int, int]]:
    """(ep, etp) pairs for attention groups of `dense` = tp * cp * dp GPUs (module docstring):
    (1, 1) for a model without MoE layers."""
    moe = arch.moe if arch is not None else None
    if moe is None:
        ones = (cons.ep is None or 1 in cons.ep) and (cons.etp is None or 1 in cons.etp)
        return [(1, 1)] if ones else []
    out = []
    for ep in _divisors(dense):
        if moe.num_experts % ep or (cons.ep is not None and ep not in cons.ep):
            continue
        if ep > 1 and caps is not None and not caps.expert_parallel:
            continue
        for etp in _divisors(dense // ep):
            if cons.etp is not None and etp not in cons.etp:
                continue
            if cons.etp is None and tp % etp:
                continue
            if moe.moe_ffn_hidden_size % etp or not _in_node(etp, n, per_node, cons):
                continue
            if etp > 1 and caps is not None and not caps.expert_tensor_parallel:
                continue
            out.append((ep, etp))
    return out


def _sequence_parallel(wanted: bool | None, caps: FrameworkCaps | None) -> list[bool]:
    """The sequence-parallel choice for tp > 1: on unless asked off or not expressible."""
    if caps is not None and not caps.sequence_parallel:
        return [] if wanted else [False]
    return [wanted is not False]


def config_unsupported(request: PlanRequest, config: Config) -> list[str]:
    """What the request's framework finds against `config` (stage split still open): the
    framework's check (planner.launch.render.view_unsupported) on the LaunchView that
    planner.launch.layers.view builds from config.candidate(), built here without the
    Candidate (validating one per configuration was most of the enumeration of a framework
    request: 322,080 for Mixtral 8x7B under megatron). tests/planner/search/
    test_space_frameworks.py checks the two agree on every configuration of its requests."""
    return framework_checker(request)(config)


def framework_checker(request: PlanRequest) -> Callable[[Config], list[str]]:
    """config_unsupported for one request: what every configuration's view shares (the shapes, the
    batch, the sequence, the framework) is read from the request once, and each verdict is
    kept for the configurations that differ from it in their recompute modes alone: a view
    without stages reads no recompute mode (LaunchView.recompute is read only through
    stage_layers(), None while the stage split is open), so they get the same reasons
    (a framework that cannot mix modes has one configuration per mode: 322,080 for Mixtral
    8x7B under megatron, a third of them distinct here)."""
    fw = request.constraints.framework
    assert fw is not None
    arch, b, seq = request.arch, request.training.global_batch_size, request.training.seq_length
    seen: dict[tuple[object, ...], list[str]] = {}

    def check(config: Config) -> list[str]:
        key = (
            config.tp,
            config.pp,
            config.dp,
            config.vpp,
            config.schedule,
            config.micro_batch_size,
            config.zero_stage,
            config.sequence_parallel,
            config.cp,
            config.ep,
            config.etp,
            config.cp_comm,
        )
        kept = seen.get(key)
        if kept is None:
            kept = seen[key] = reasons(config)
        return list(kept)

    def reasons(config: Config) -> list[str]:
        per = config.dp * config.micro_batch_size
        v = LaunchView(
            tp=config.tp,
            pp=config.pp,
            dp=config.dp,
            vpp=config.vpp,
            schedule=config.schedule,
            micro_batch_size=config.micro_batch_size,
            zero_stage=config.zero_stage,
            sequence_parallel=config.sequence_parallel,
            recompute=config.modes[0] if len(config.modes) == 1 else "none",  # Config.candidate
            stages=None,
            arch=arch,
            global_batch_size=b,
            num_microbatches=b // per if b % per == 0 else None,
            seq_length=seq,
            cp=config.cp,
            ep=config.ep,
            etp=config.etp,
            cp_comm=config.cp_comm,
        )
        return view_unsupported(v, fw)

    return check


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
