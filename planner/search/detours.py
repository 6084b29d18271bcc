"""Rounded detour rows: what whole layers add to an interleaved rank's chain, for the LP.

Rank r's through path (the fill to its first action, every action of r in order, the drain
after its last: planner.search.paths.seed_cuts) may leave r's chain at its action on stage s
and rejoin it at its action on s + pp (forward) or s - pp (backward), through the same
micro-batch's actions on the stages between, all on other ranks (paths.detour_paths); the
detours found are disjoint, so every subset K of them gives a path, and for every partition

    makespan >= len(base) + sum_{k in K} delta_k   for every K,  so
    makespan >= len(base) + sum_k max(0, delta_k),

delta_k = the detour's length less the rank's actions it skips. For a GPT-shaped
configuration (embedding, N equal blocks, head) with d_s blocks in stage s, a forward
detour's delta_k is f z_k + c_k: f one block's forward, z_k = sum_s Delta_{k,s} d_s an
integer (Delta: the detour's actions less the skipped ones, per stage), c_k a lower bound of
the rest (the first / last layer's forward where the detour passes stage 0 / S - 1, the
per-action overhead, each boundary crossed at the cheapest p2p). A backward detour likewise
with u = one block's backward, only where every block's backward takes the same time in
every allowed mode (bounds.restricted makes it so for a single mode): otherwise its delta is
no multiple of one unit.

phi(z) = max(0, u z + c) is convex, so at every integer z it is at least the chord through
its values at z0 = floor(-c / u) (0) and z0 + 1 (v = u (z0 + 1) + c, 0 < v <= u), extended:
v (z - z0) (for z <= z0 it is <= 0 <= phi; for z > z0, phi grows by u >= v per step). With
the line u z + c and 0 that is phi's convex hull over the integers, so a variable y_k with

    y_k >= 0,   y_k >= u z_k + c_k,   y_k >= v_k (z_k - z0_k),   T >= len(base) + sum_k y_k

holds every partition (y_k = phi_k(z_k)). The chord is a split cut (Cook, Kannan and
Schrijver 1990) on the disjunction z_k <= z0_k or z_k >= z0_k + 1: the LP with fractional
layers balances each detour to delta = 0 and pays nothing for it, and whole layers cannot.
An interleaved rank detours at every chunk change of its warm-up (F) and cool-down (B), each
crossing pp boundaries: those p2p crossings and the whole blocks around them are what the
fill-and-drain floors and the path cuts of the fractional optimum miss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.cost import PartitionInputs
from planner.schedules import Schedule
from planner.search.paths import Detour, PathCut, detour_paths


@dataclass(frozen=True)
class DetourPiece:
    """One detour's rounding: z = sum_s delta[s] d_s, phi(z) >= max(0, u z + c, v (z - z0))."""

    delta: tuple[int, ...]
    u: float
    c: float
    v: float
    z0: int

    def least(self, z: float) -> float:
        """The hull of max(0, u z + c) over the integers, at z."""
        return max(0.0, self.u * z + self.c, self.v * (z - self.z0))


@dataclass(frozen=True)
class DetourRow:
    """makespan >= beta + sum_s alpha[s] d_s + sum_k pieces[k].least(z_k) for every
    partition (d_s: blocks in stage s)."""

    beta: float
    alpha: tuple[float, ...]
    pieces: tuple[DetourPiece, ...]

    def chords(self) -> tuple[float, tuple[float, ...]]:
        """(beta', alpha'): the row with each detour at its chord, v_k (z_k - z0_k), one
        linear bound beta' + alpha' . d (at most the row: the chord is at most the hull at
        every integer z)."""
        alpha = list(self.alpha)
        beta = self.beta
        for p in self.pieces:
            for s, dz in enumerate(p.delta):
                if dz:
                    alpha[s] += p.v * dz
            beta -= p.v * p.z0
        return beta, tuple(alpha)

    def value_s(self, blocks: tuple[int, ...]) -> float:
        """The row's bound for a partition with `blocks` blocks per stage."""
        out = self.beta + sum(a * d for a, d in zip(self.alpha, blocks, strict=True))
        for p in self.pieces:
            out += p.least(sum(k * d for k, d in zip(p.delta, blocks, strict=True)))
        return out


def detour_rows(inputs: PartitionInputs, schedule: Schedule) -> list[DetourRow]:
    """One DetourRow per rank with detours (module docstring); none where the configuration
    is not GPT-shaped (its middle layers' forward, weight-gradient backward or cheapest
    input-gradient backward differ) or its schedule has no detours. The base path's
    backward is at the cheapest mode (a lower bound of its length)."""
    chains = detour_paths(schedule)
    n_layers, n_st = inputs.num_layers, inputs.num_stages
    if not chains or n_layers < 3 or not _same_blocks(inputs):
        return []
    f, bi, w = inputs.fw_s[1], min(inputs.bw_input_s[1]), inputs.bw_weight_s[1]
    exact_b = all(len(set(inputs.bw_input_s[i])) == 1 for i in range(1, n_layers - 1))
    over = inputs.overhead_durations
    hop = min(inputs.p2p_s[:-1], default=0.0)
    # per stage: the first / last layer's least and largest forward and backward
    fw_end, bw_lo, bw_hi = [0.0] * n_st, [0.0] * n_st, [0.0] * n_st
    for layer, s in ((0, 0), (n_layers - 1, n_st - 1)):
        fw_end[s] += inputs.fw_s[layer]
        bw_lo[s] += min(inputs.bw_input_s[layer]) + inputs.bw_weight_s[layer]
        bw_hi[s] += max(inputs.bw_input_s[layer]) + inputs.bw_weight_s[layer]
    forward = _Unit(f, fw_end, fw_end, over.fw_s[0], hop)
    backward = _Unit(bi + w, bw_lo, bw_hi, over.bw_s[0], hop)
    rows = []
    for chain in chains:
        base = chain.base
        alpha = tuple(
            cf * f + cb * (bi + w) + ci * bi + cw * w
            for cf, cb, ci, cw in zip(base.f, base.b, base.i, base.w, strict=True)
        )
        beta = sum(base.x) * hop + base.length_s(over) + _end_terms(inputs, base)
        pieces = tuple(
            (backward if d.backward else forward).piece(d)
            for d in chain.detours
            if exact_b or not d.backward
        )
        rows.append(DetourRow(beta, alpha, pieces))
    return rows


def _same_blocks(inputs: PartitionInputs) -> bool:
    """Every middle layer has layer 1's forward, weight-gradient and cheapest input-gradient
    backward (the rows count blocks, each at those times)."""
    mid = range(1, inputs.num_layers - 1)
    f, w, bi = inputs.fw_s[1], inputs.bw_weight_s[1], min(inputs.bw_input_s[1])
    return all(
        inputs.fw_s[i] == f and inputs.bw_weight_s[i] == w and min(inputs.bw_input_s[i]) == bi
        for i in mid
    )


@dataclass(frozen=True)
class _Unit:
    """One block's time `u` in a detour's kind, per stage the first / last layer's least
    (`lo`) and largest (`hi`) time in that kind, the per-action overhead, the least p2p."""

    u: float
    lo: list[float]
    hi: list[float]
    overhead: float
    hop: float

    def piece(self, detour: Detour) -> DetourPiece:
        """The detour's rounding: c at its least (the end layers at their least where the
        detour adds them, at their largest where it skips them)."""
        c = detour.crossings * self.hop
        for s, dz in enumerate(detour.delta):
            if dz:
                c += dz * ((self.lo[s] if dz > 0 else self.hi[s]) + self.overhead)
        if self.u <= 0.0:  # no block time: delta is c whatever the partition
            return DetourPiece(detour.delta, 0.0, c, 0.0, 0)
        z0 = math.floor(-c / self.u)
        return DetourPiece(detour.delta, self.u, c, self.u * (z0 + 1) + c, z0)


def _end_terms(inputs: PartitionInputs, cut: PathCut) -> float:
    """The first and last layer's terms of `cut`'s length (cheapest input-gradient mode)."""
    out = 0.0
    for layer, s in ((0, 0), (inputs.num_layers - 1, inputs.num_stages - 1)):
        b_in, w = min(inputs.bw_input_s[layer]), inputs.bw_weight_s[layer]
        out += cut.f[s] * inputs.fw_s[layer] + cut.b[s] * (b_in + w) + cut.i[s] * b_in
        out += cut.w[s] * w
    return out
