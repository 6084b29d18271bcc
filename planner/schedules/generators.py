"""Schedule generators: `generate(name, pp=, vpp=, num_microbatches=)` -> Schedule.

Every order here is the per-rank compute order that `torch.distributed.pipelining` runs
(compute actions only; torch's `None` spacers and communication actions are left out):

- `gpipe`: all forwards, then all backwards in micro-batch order (Huang et al. 2019;
  torch `ScheduleGPipe`).
- `1f1b`: PipeDream-Flush (Narayanan et al. 2021 §2.2.1; torch `Schedule1F1B`): rank r warms up
  with min(pp - 1 - r, m) forwards, then alternates one forward and one backward, then drains.
- `interleaved-1f1b`: Narayanan et al. 2021 §2.2.2, depth first, with torch's
  `ScheduleInterleaved1F1B` rounds (m need not be a multiple of pp, but m % max(1, m // pp) == 0).
- `zb-h1`: Qi et al. 2024 ZB-H1, backward split into I (input grad) and W (weight grad); torch's
  `ScheduleInterleavedZeroBubble` order (with vpp = 1 this is ZB-H1; vpp >= 2 is its interleaved
  form, which torch also runs).
- `zbv`: Qi et al. 2024 §6 ZB-V, two chunks per rank in a V; torch's `ScheduleZBVZeroBubble`.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from functools import lru_cache
from typing import overload

from planner.errors import SpecError
from planner.schedules import kernel
from planner.schedules.ir import Action, ActionKind, Schedule
from planner.specs.base import SCHEDULES, ScheduleName

__all__ = ["check_generate_args", "generate", "peak_inflight_of", "schedule_codes"]

_F, _B, _I, _W = ActionKind.F, ActionKind.B, ActionKind.I, ActionKind.W
RankOps = list[tuple[int, ActionKind]]  # one rank's (stage, kind) in order


def generate(name: ScheduleName, *, pp: int, vpp: int, num_microbatches: int) -> Schedule:
    """The schedule `name` for `pp` ranks, `vpp` chunks per rank, `num_microbatches` micro-batches.

    Raises SpecError (naming the field and the numbers) for combinations the schedule, or torch's
    implementation of it, does not support. Results are cached: the same arguments return the same
    (immutable) Schedule object, which lets the simulator reuse its precomputed dependency graph.
    """
    return _generate(name, pp, vpp, num_microbatches)


def check_generate_args(name: str, *, pp: int, vpp: int, num_microbatches: int) -> None:
    """Raise the SpecError `generate` would raise for these arguments, without building anything."""
    _check(name, pp, vpp, num_microbatches)


@lru_cache(maxsize=128)
def _generate(name: ScheduleName, pp: int, vpp: int, m: int) -> Schedule:
    _check(name, pp, vpp, m)
    codes, counts = order_codes(name, pp, vpp, m)
    return Schedule(name=name, pp=pp, vpp=vpp, num_microbatches=m, orders=Orders(codes, counts))


_KIND_CODE = {"gpipe": 0, "1f1b": 1, "interleaved-1f1b": 2, "zb-h1": 3, "zbv": 4}
_KINDS = (_F, _B, _I, _W)  # code order, as planner.schedules.validate.KIND_INDEX
_KIND = {kind: k for k, kind in enumerate(_KINDS)}


def order_codes(name: ScheduleName, pp: int, vpp: int, m: int) -> tuple[array[int], list[int]]:
    """Every rank's order as int32 triples (stage, kind index, micro-batch), ranks one after
    another, and each rank's action count: the C extension's loops (planner/schedules/
    _kernel.c, the same as this module's) when built, else this module's generators.
    Arguments are not checked (generate checks them)."""
    if kernel.available():
        raw, counts = kernel.generate_codes(_KIND_CODE[name], pp, vpp, m)
        codes = array("i")
        codes.frombytes(raw)
        return codes, counts
    return order_codes_python(name, pp, vpp, m)


def order_codes_python(
    name: ScheduleName, pp: int, vpp: int, m: int
) -> tuple[array[int], list[int]]:
    """order_codes from the Python generators (the reference the C loops are tested
    against)."""
    orders = [_numbered(ops, m) for ops in _all_ops(name, pp, vpp, m)]
    return _codes_of(orders), [len(order) for order in orders]


def _codes_of(orders: Sequence[tuple[Action, ...]]) -> array[int]:
    return array(
        "i", [x for o in orders for a in o for x in (a.stage, _KIND[a.kind], a.microbatch)]
    )


def schedule_codes(schedule: Schedule) -> tuple[array[int], list[int]]:
    """Any schedule's orders as order_codes lays them out, and each rank's first triple
    (offsets, one more at the end): a generated schedule's own codes, else read from its
    Action tuples. What the simulator compiles and the search counts."""
    orders = schedule.orders
    if isinstance(orders, Orders):
        return orders.codes, orders.offsets
    return _codes_of(orders), [0, *itertools.accumulate(len(order) for order in orders)]


class Orders(Sequence[tuple[Action, ...]]):
    """A generated schedule's per-rank orders, kept as codes (order_codes); a rank's Action
    tuple is built when first read. The simulator compiles straight from the codes
    (planner.schedules.simulate), so the search, which simulates hundreds of schedules of up
    to 10^5 actions, never builds most of them. Compares equal to the tuple of tuples."""

    def __init__(self, codes: array[int], counts: list[int]) -> None:
        self.codes = codes
        self.offsets = [0, *itertools.accumulate(counts)]  # in actions
        self._built: dict[int, tuple[Action, ...]] = {}

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, rank: int) -> tuple[Action, ...]: ...

    @overload
    def __getitem__(self, rank: slice) -> tuple[tuple[Action, ...], ...]: ...

    def __getitem__(self, rank: int | slice) -> tuple[Action, ...] | tuple[tuple[Action, ...], ...]:
        if isinstance(rank, slice):
            return tuple(self[r] for r in range(len(self))[rank])
        if rank < 0:
            rank += len(self)
        if not 0 <= rank < len(self):
            raise IndexError(rank)
        built = self._built.get(rank)
        if built is None:
            c, lo, hi = self.codes, 3 * self.offsets[rank], 3 * self.offsets[rank + 1]
            built = self._built[rank] = tuple(
                _action(c[j], _KINDS[c[j + 1]], c[j + 2]) for j in range(lo, hi, 3)
            )
        return built

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Orders | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


def peak_inflight_of(
    name: ScheduleName, *, pp: int, vpp: int, num_microbatches: int
) -> tuple[int, ...]:
    """planner.schedules.inflight.peak_inflight(generate(...)) without building the schedule
    (the search needs the counts of every configuration it bounds). Closed forms, checked
    against the generated orders (tests/planner/schedules/test_schedule_closed_forms.py, pp
    <= 16, m <= 48): GPipe holds every micro-batch; 1F1B min(m, pp - s) (Narayanan et al.
    2021 §2.2.1); ZB-H1 defers W, so every stage holds min(m, pp) (Qi et al. 2024 §3); ZB-V's
    stage s (of 2 pp in the V) holds min(m, 2 pp - s). The interleaved orders are counted as
    their op sequence is generated (_interleaved_peaks)."""
    _check(name, pp, vpp, num_microbatches)
    m = num_microbatches
    if name == "gpipe":
        return (m,) * pp
    if name == "1f1b":
        return tuple(min(m, pp - s) for s in range(pp))
    if name == "zb-h1" and vpp == 1:
        return (min(m, pp),) * pp
    if name == "zbv":
        return tuple(min(m, 2 * pp - s) for s in range(2 * pp))
    peak = [0] * (pp * vpp)  # interleaved-1f1b, or zb-h1's interleaved form
    for rank in range(pp):
        per_chunk = _interleaved_peaks(rank, pp, vpp, m, zero_bubble=name == "zb-h1")
        for chunk, count in enumerate(per_chunk):
            peak[chunk * pp + rank] = count
    return tuple(peak)


def _all_ops(name: ScheduleName, pp: int, vpp: int, m: int) -> tuple[RankOps, ...]:
    """Every rank's (stage, kind) order."""
    return tuple(_rank_ops(name, r, pp, vpp, m) for r in range(pp))


def _rank_ops(name: ScheduleName, rank: int, pp: int, vpp: int, m: int) -> RankOps:
    if name == "gpipe":
        return _gpipe(rank, m)
    if name == "1f1b":
        return _one_f_one_b(rank, pp, m)
    if name == "interleaved-1f1b":
        return _interleaved(rank, pp, vpp, m, zero_bubble=False)
    if name == "zb-h1":
        return _interleaved(rank, pp, vpp, m, zero_bubble=True)
    return _zbv(rank, pp, m)


# Actions are immutable: one object per (stage, kind, micro-batch), shared by every schedule
# (building them is most of `generate`'s cost; the search generates hundreds of schedules).
# At most _INTERN_MAX of them are kept; past that, new ones are built each time.
_INTERNED: dict[tuple[int, ActionKind], list[Action]] = {}
_INTERN_MAX = 1 << 18
_interned_count = 0


def _numbered(ops: RankOps, m: int) -> tuple[Action, ...]:
    """Actions from (stage, kind) pairs: each pair's n-th occurrence is micro-batch n (every
    generator here issues each stage's F, B, I and W in micro-batch order); those >= m are
    dropped (zbv's orders are built for more micro-batches, as torch does)."""
    seen: dict[tuple[int, ActionKind], int] = {}
    out = []
    for op in ops:
        index = seen.get(op, 0)
        seen[op] = index + 1
        if index < m:
            out.append(_action(op[0], op[1], index))
    return tuple(out)


def _action(stage: int, kind: ActionKind, index: int) -> Action:
    """The shared Action (stage, kind, index) (interned, up to _INTERN_MAX)."""
    global _interned_count
    known = _INTERNED.get((stage, kind))
    if known is None:
        known = _INTERNED[(stage, kind)] = []
    if index < len(known):
        return known[index]
    action = Action(stage, kind, index)
    if index == len(known) and _interned_count < _INTERN_MAX:
        known.append(action)
        _interned_count += 1
    return action


def _check(name: str, pp: int, vpp: int, m: int) -> None:
    if name not in SCHEDULES:
        raise SpecError("schedule", name, f"unknown schedule; known: {', '.join(SCHEDULES)}")
    for field, value in (("pp", pp), ("vpp", vpp), ("num_microbatches", m)):
        if value < 1:
            raise SpecError(field, value, "must be >= 1")
    if name in ("gpipe", "1f1b") and vpp != 1:
        raise SpecError("vpp", vpp, f"schedule {name!r} runs one chunk per rank (vpp=1)")
    if name == "interleaved-1f1b" and vpp < 2:
        raise SpecError("vpp", vpp, "schedule 'interleaved-1f1b' needs vpp >= 2")
    if name == "zbv" and vpp != 2:
        raise SpecError("vpp", vpp, "schedule 'zbv' needs exactly vpp=2 chunks per rank (a V)")
    if name in ("interleaved-1f1b", "zb-h1"):
        rounds = max(1, m // pp)
        if m % rounds:
            raise SpecError(
                "num_microbatches",
                m,
                f"{name} (torch's round-based order) needs num_microbatches % max(1, "
                f"num_microbatches // pp) == 0; with pp={pp} that is {m} % {rounds} = {m % rounds}",
            )


def _gpipe(rank: int, m: int) -> RankOps:
    return [(rank, _F)] * m + [(rank, _B)] * m


def _one_f_one_b(rank: int, pp: int, m: int) -> RankOps:
    warmup = min(pp - 1 - rank, m)
    return [(rank, _F)] * warmup + [(rank, _F), (rank, _B)] * (m - warmup) + [(rank, _B)] * warmup


def _interleaved_shape(
    rank: int, pp: int, vpp: int, m: int, *, zero_bubble: bool
) -> tuple[int, int, int]:
    """(micro-batches per round, warm-up forwards, ops per kind) of rank `rank`'s interleaved
    order: torch's rounds of max(1, m // pp), warm-up (vpp - 1) * per_round + k * (pp - 1 -
    rank) with k = 2 (1F1B) or 1 (zero bubble), capped at vpp * m."""
    per_round = m // max(1, m // pp)
    factor = 1 if zero_bubble else 2
    warmup = min((vpp - 1) * per_round + factor * (pp - 1 - rank), m * vpp)
    return per_round, warmup, m * vpp


def _interleaved(rank: int, pp: int, vpp: int, m: int, *, zero_bubble: bool) -> RankOps:
    """torch's `_get_1f1b_rank_ops` for `ScheduleInterleaved1F1B` / `ScheduleInterleavedZeroBubble`.

    Warm-up forwards: (vpp - 1) * per_round + k * (pp - 1 - rank), k = 2 (1F1B) or 1 (zero
    bubble), capped at vpp * m; local chunks advance every `per_round` micro-batches, forwards
    from the first chunk up, backwards from the last chunk down (depth first). The zero-bubble
    form issues I in place of B and starts deferring W once `rank` backwards have run.
    """
    per_round, warmup, total = _interleaved_shape(rank, pp, vpp, m, zero_bubble=zero_bubble)
    steady = total - warmup

    def fwd_stage(op: int) -> int:
        return ((op // per_round) % vpp) * pp + rank

    def bwd_stage(op: int) -> int:
        return (vpp - 1 - ((op - warmup) // per_round) % vpp) * pp + rank

    bwd_kind = _I if zero_bubble else _B
    backward_ops: list[int] = []
    order: RankOps = []
    weights_done = 0

    def maybe_weight(op: int) -> None:
        nonlocal weights_done
        if zero_bubble and op - warmup >= rank:
            order.append((bwd_stage(backward_ops[weights_done]), _W))
            weights_done += 1

    for op in range(warmup + total):
        if op < warmup:
            order.append((fwd_stage(op), _F))
            continue
        if op < warmup + steady:
            order.append((fwd_stage(op), _F))
        order.append((bwd_stage(op), bwd_kind))
        backward_ops.append(op)
        maybe_weight(op)
    while zero_bubble and weights_done < len(backward_ops):
        order.append((bwd_stage(backward_ops[weights_done]), _W))
        weights_done += 1
    return order


def _interleaved_peaks(rank: int, pp: int, vpp: int, m: int, *, zero_bubble: bool) -> list[int]:
    """Per chunk of `rank`, the peak in-flight micro-batches of _interleaved's order, counted
    as it is generated (no order built: +1 at each F, -1 at each B, or W when zero-bubble;
    the same op sequence as _interleaved, checked against it in
    tests/planner/schedules/test_schedule_closed_forms.py)."""
    per_round, warmup, total = _interleaved_shape(rank, pp, vpp, m, zero_bubble=zero_bubble)
    steady = total - warmup
    held, peak = [0] * vpp, [0] * vpp
    backward_chunks: list[int] = []
    weights_done = 0
    # In the steady state each op runs one forward and one backward whose chunks repeat with
    # period per_round * vpp (the deferred W: the same, `rank` ops later), so every chunk's
    # count repeats from one period to the next once the W lag is in; after it only
    # backwards run. So no peak comes after two periods past warm-up and the lag.
    settled = warmup + rank + 2 * per_round * vpp
    for op in range(warmup + total):
        if settled <= op < warmup + steady:
            break
        if op < warmup + steady:
            c = (op // per_round) % vpp
            held[c] += 1
            if held[c] > peak[c]:
                peak[c] = held[c]
        if op < warmup:
            continue
        c = vpp - 1 - ((op - warmup) // per_round) % vpp
        if not zero_bubble:
            held[c] -= 1
            continue
        backward_chunks.append(c)
        if op - warmup >= rank:  # a deferred W releases the oldest backward's activations
            held[backward_chunks[weights_done]] -= 1
            weights_done += 1
    return peak


def _zbv(rank: int, pp: int, m: int) -> RankOps:
    """torch's `ScheduleZBVZeroBubble._calculate_single_rank_operations` (Qi et al. 2024 §6).

    Rank r holds chunk 0 = stage r and chunk 1 = stage 2 * pp - 1 - r. The order is built for
    max(2 * pp - 1, m) micro-batches and the ones >= m are dropped, as torch does (_numbered;
    each stage's F, I and W run in micro-batch order, so the index is the occurrence count).
    """
    n = max(2 * pp - 1, m)
    s0, s1 = rank, 2 * pp - 1 - rank
    order: RankOps = []
    f0 = f1 = b0 = b1 = 0

    def add(stage: int, kind: ActionKind, index: int) -> None:
        # torch's micro-batch index, kept to read like torch's code; _numbered derives the
        # same number from the occurrence count
        order.append((stage, kind))

    for _ in range(2 * (pp - rank) - 1):
        add(s0, _F, f0)
        f0 += 1
    for _ in range(rank):
        add(s1, _F, f1)
        f1 += 1
        add(s0, _F, f0)
        f0 += 1
    for _ in range(pp - rank):
        add(s1, _F, f1)
        f1 += 1
        add(s1, _I, b1)
        add(s1, _W, b1)
        b1 += 1
    while f1 < f0 or f0 < n:
        if f0 < n:
            add(s0, _F, f0)
            f0 += 1
        add(s0, _I, b0)
        add(s0, _W, b0)
        b0 += 1
        add(s1, _F, f1)
        f1 += 1
        add(s1, _I, b1)
        add(s1, _W, b1)
        b1 += 1
    w0, w1 = b0, b1
    for _ in range(rank):
        add(s0, _I, b0)
        b0 += 1
        add(s1, _I, b1)
        b1 += 1
    for _ in range(pp - rank):
        add(s0, _I, b0)
        b0 += 1
        add(s0, _W, w0)
        w0 += 1
    drain: list[tuple[int, int, int]] = [(s1, w1, b1), (s0, w0, b0)]
    for stage, start, end in drain:
        for index in range(start, end):
            add(stage, _W, index)
    return order
