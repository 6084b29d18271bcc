"""The LP relaxation of one configuration, kept between solves so that path cuts can be added:
the cutting-plane phase of planner.search.exact.

The model of planner.search.model relaxed (GLOP; x[g, s, k] >= 0 a *fractional* number of run
g's layers in stage s with mode k, every stage holds at least one layer, no contiguity):

    minimise T + P  subject to
        T >= len_c(x) + overhead_c + X_c p2p_min   for every path cut c added so far
        P >= post_r(x)                             per rank r (DP sync + optimizer)
        memory_r,p(x) <= cap - fixed               per rank r and seed held point p of r
                                                   (planner.search.model.memory_rows)

(X_c: the boundaries between ranks the path crosses, each at least the cheapest p2p time.)

Every real partition is a feasible point whose objective is at most its simulated step time,
so each optimum is a lower bound of the configuration's optimum. Why it is kept: one LP with a
few seed cuts is far below the optimum when stages hold one or two layers (18.4B, pp = 2
interleaved with 22 stages: 0.986 of the incumbent), but the paths it is missing are the
critical paths of partitions *near its own solution*. Rounding the fractional solution to a
partition, simulating it and its one-boundary neighbours, and adding their critical paths
raises it (to 0.998 of the incumbent in 22 rounds there), and CP-SAT given those cuts proves
what it cannot prove with the seeds alone (docs/search.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from ortools.linear_solver import linear_solver_pb2, pywraplp

from planner.cost import MODE_INDEX, PartitionInputs
from planner.schedules import StageDurations
from planner.search.bounds import restricted
from planner.search.detours import DetourRow, detour_rows
from planner.search.model import Run, layer_runs, memory_rows, undominated_modes
from planner.search.partition import schedule_of
from planner.search.paths import PathCut
from planner.specs.base import RecomputeMode

# Floors from the LP are used with this relative margin above GLOP's tolerances.
MARGIN = 1e-6
# GLOP re-solves warm: no presolve (it rebuilds the problem and drops the basis on every
# solve) and the dual simplex (a basis stays dual feasible when a cut row is added or a count
# bound moves, which is all that changes between solves); the optima are the same.
GLOP_PARAMETERS = "use_preprocessing: false use_dual_simplex: true"
# CutLP solves first without scaling: GLOP scales the matrix again on every solve, and the
# cut LP's re-solves (a row added or a count bound moved) take fewer and cheaper iterations
# without it where its coefficients are of like magnitudes (seconds per layer, layer counts,
# memory rows in units of the room). Where they are not (a measured profile's microseconds
# against its bytes), an unscaled solve can cycle: it stops at the iteration limit, far
# above what a converging cut-LP solve takes (at most ~1,100 on the planning benchmark),
# and that CutLP solves scaled (GLOP_PARAMETERS) from then on.
UNSCALED_ITERATION_LIMIT = 10_000
CUT_LP_PARAMETERS = (
    f"{GLOP_PARAMETERS} use_scaling: false max_number_of_iterations: {UNSCALED_ITERATION_LIMIT}"
)


@dataclass(frozen=True)
class PoolPolicy:
    """Which cut rows a CutLP holds in GLOP. CutLP keeps every cut it is given (the pool),
    but the model holds only the cut rows tight (within `tight` of T) at one of the last
    `keep_solves` solves, and those added since: a re-solve costs in proportion to the rows
    held (GLOP re-extracts the whole model on every solve), and most rows of a long
    cutting-plane or probing run stay slack once later cuts pass them. The model is rebuilt
    without the others once more than `compact_rows` of them are held. After every solve the
    pool's other cuts are checked at the optimum; any above T (by more than `tight`) goes
    back into the model and the LP is solved again. So the optimum satisfies every cut
    given, and its value is the one of the LP holding every row, within `tight` (far below
    MARGIN)."""

    tight: float = 1e-7  # relative to T
    keep_solves: int = 32
    compact_rows: int = 128


POOL = PoolPolicy()

INF = float("inf")


class _Model:
    """An MPModelProto filled row by row from lists, then loaded into a GLOP MPSolver."""

    def __init__(self) -> None:
        self.proto = linear_solver_pb2.MPModelProto()

    def var(self, lo: float, hi: float, objective: float = 0.0) -> int:
        """A new variable's index."""
        v = self.proto.variable.add()
        v.lower_bound, v.upper_bound, v.objective_coefficient = lo, hi, objective
        return len(self.proto.variable) - 1

    def row(self, lo: float, hi: float, at: list[int], coefficients: list[float]) -> None:
        """lo <= sum_k coefficients[k] x[at[k]] <= hi (zero coefficients left out, as
        pywraplp's SetCoefficient leaves them)."""
        c = self.proto.constraint.add()
        c.lower_bound, c.upper_bound = lo, hi
        if 0.0 in coefficients:
            kept = [(j, a) for j, a in zip(at, coefficients, strict=True) if a != 0.0]
            at, coefficients = [j for j, _ in kept], [a for _, a in kept]
        c.var_index.extend(at)
        c.coefficient.extend(coefficients)

    def load(self, parameters: str) -> pywraplp.Solver:
        solver = pywraplp.Solver.CreateSolver("GLOP")
        if solver is None:  # pragma: no cover - ships with OR-Tools
            raise RuntimeError("OR-Tools has no GLOP solver")
        if not solver.SetSolverSpecificParametersAsString(parameters):
            raise ValueError(f"GLOP rejects its parameters {parameters!r}")
        error = solver.LoadModelFromProto(self.proto)
        if error:  # pragma: no cover - the rows above are valid by construction
            raise ValueError(f"the cut LP's model is invalid: {error}")
        return solver


@dataclass(frozen=True)
class LpPoint:
    value_s: float  # the LP optimum: a lower bound of the configuration's step time
    stage_layers: tuple[float, ...]  # fractional layers per stage at the optimum
    rank_counts: tuple[float, ...] = ()  # layers of the counted run per rank (count_run)
    run_stage_counts: tuple[float, ...] = ()  # ... and per stage
    makespan_s: float = 0.0  # T at the optimum: at least every cut's row (value_s = T + P)
    # the stage durations of the optimum's fractional layers (each boundary at the cheapest
    # p2p): every cut's length under them is its row's value at the optimum, at most T
    durations: StageDurations | None = None

    def reaches(self, bound_s: float) -> bool:
        """The LP floor is at or above `bound_s` beyond the solvers' tolerances (MARGIN):
        nothing in this LP's region beats the bound (an infeasible LP's value is inf)."""
        return self.value_s >= bound_s * (1 + MARGIN)


class CutLP:
    """GLOP model of the relaxation; `add_cut` appends a row, `solve` re-solves."""

    def __init__(
        self,
        inputs: PartitionInputs,
        modes: tuple[RecomputeMode, ...],
        *,
        cuts: Iterable[PathCut] = (),
        detours: bool = True,
        pool: PoolPolicy = POOL,
    ) -> None:
        self.inputs = inputs
        self.policy = pool
        self.modes = modes
        self._cuts: list[PathCut] = []  # the pool: every cut given, in order
        self._seen: set[PathCut] = set()
        self._pool = _Pool(pool.tight)  # the cuts' rows (constant, dense coefficients)
        self._held: list[int] = []  # pool indices of the cut rows in the model, in row order
        self._solves = 0
        # every boundary a path crosses (between ranks) costs at least the cheapest p2p
        self._p2p = min(inputs.p2p_s[:-1], default=0.0)
        self._counted: int | None = None  # the run whose per-rank count has rows (count_run)
        self._parameters = CUT_LP_PARAMETERS  # GLOP_PARAMETERS once an unscaled solve failed
        self._count_bounds: tuple[tuple[int, int], ...] = ()
        # the rounded detour rows (planner.search.detours) of the modes allowed here
        self._detours: list[DetourRow] = (
            detour_rows(restricted(inputs, modes), schedule_of(inputs)) if detours else []
        )
        self._build_terms()
        for cut in cuts:  # in the model from the start (_build)
            if self._pooled(cut):
                self._held.append(len(self._cuts) - 1)
        self._build()

    def _build_terms(self) -> None:
        """The x variables' keys (run, stage, mode index), in model order, and a cut row's
        terms in that order: (stage, its layer's forward, weight-gradient and input-gradient
        backward times in its mode)."""
        inputs, modes = self.inputs, self.modes
        runs = layer_runs(inputs)
        self._first = [run.first for run in runs]
        n, n_st = inputs.num_layers, inputs.num_stages
        keys: list[tuple[int, int, int]] = []
        for g, run in enumerate(runs):
            lo = max(0, run.first - (n - n_st))
            hi = min(n_st - 1, run.first + run.count - 1)
            for s in range(lo, hi + 1):
                for mode in undominated_modes(inputs, run.first, modes):
                    keys.append((g, s, MODE_INDEX[mode]))
        self._keys = keys
        self._terms = [
            (
                s,
                inputs.fw_s[self._first[g]],
                inputs.bw_weight_s[self._first[g]],
                inputs.bw_input_s[self._first[g]][k],
            )
            for g, s, k in keys
        ]
        self._pool.width = len(keys)

    def _build(self) -> None:
        """The LP with the held cut rows: built as one MPModelProto and loaded in one call
        (each coefficient set through pywraplp costs a Python-to-C++ call; the proto's rows
        are filled from lists), with its variables and rows in the order they are listed
        here."""
        inputs = self.inputs
        runs = layer_runs(inputs)
        n_st = inputs.num_stages
        keys = self._keys
        model = _Model()
        for g, _, _ in keys:
            model.var(0.0, runs[g].count)
        # the variables of each run, stage and rank, in the order of `keys`
        of_run: list[list[int]] = [[] for _ in runs]
        of_stage: list[list[int]] = [[] for _ in range(n_st)]
        of_rank: list[list[int]] = [[] for _ in range(inputs.pp)]
        for j, (g, s, _) in enumerate(keys):
            of_run[g].append(j)
            of_stage[s].append(j)
            of_rank[inputs.stage_rank[s]].append(j)
        for g, run in enumerate(runs):
            model.row(run.count, run.count, of_run[g], [1.0] * len(of_run[g]))
        for s in range(n_st):
            model.row(1.0, INF, of_stage[s], [1.0] * len(of_stage[s]))
        t, p = model.var(0.0, INF, objective=1.0), model.var(0.0, INF, objective=1.0)
        # Memory rows in units of the room (cap - fixed), so that bytes (~1e10) and seconds
        # (~1e-3 .. 10) stay within GLOP's tolerances: with raw bytes it reported the LP
        # ABNORMAL after ~100 cuts on 18.4B's pp = 2 interleaved vpp = 12.
        room = inputs.cap_bytes - inputs.fixed_bytes
        unit = 1.0 / room if room > 0 else 1.0
        grow = 1.0 + inputs.fragmentation_fraction
        for r in range(inputs.pp):
            mine = of_rank[r]
            post = [-inputs.post_s[self._first[keys[j][0]]] for j in mine]
            model.row(0.0, INF, [p, *mine], [1.0, *post])
            for point, slot, const in memory_rows(inputs, r):
                coefficients = []
                for j in mine:
                    g, s, k = keys[j]
                    i = self._first[g]
                    act = point.counts[slot[s]] * inputs.activation_bytes[i][k] * grow
                    coefficients.append((inputs.static_bytes[i] + act) * unit)
                model.row(-INF, (room - const) * unit, mine, coefficients)
        self._add_detours(runs, model, keys)
        for i in self._held:
            constant, at, coefficients = self._pool.row(i)
            model.row(constant, INF, [t, *at], [1.0, *coefficients])
        self.solver = model.load(self._parameters)
        variables = self.solver.variables()
        self._vars = variables[: len(keys)]
        self.x: dict[tuple[int, int, int], pywraplp.Variable] = dict(
            zip(keys, self._vars, strict=True)
        )
        self.t, self.p = variables[t], variables[p]
        self._count_rows: list[pywraplp.Constraint] = []
        self._held_bounds: list[tuple[int, int] | None] = []
        if self._counted is not None:
            self.count_run(self._counted)
            self.set_count_bounds(self._count_bounds)

    def _add_detours(
        self, runs: tuple[Run, ...], model: _Model, keys: list[tuple[int, int, int]]
    ) -> None:
        """The detour rows, with d_s the middle run's layers in stage s (only where one run
        holds every middle layer, as detour_rows counts them). Under interleaved-1f1b at
        their hulls: T >= beta + alpha . d + sum_k y_k per rank, each y_k >= 0,
        >= u z_k + c_k and >= v_k (z_k - z0_k) (DetourPiece.least): where the LP piles a
        rank's blocks on one stage of a detour the chord's slope is below u, and the hull
        raises the interleaved floors (Llama 2 70B on 512 A100s, docs/search.md). Under the
        other schedules with detours (zbv) at their chords, one row per rank and no
        variable (DetourRow.chords): there the hull's variables made the LP phases slower
        and raised no floor the proof needed (GPT-3 175B on 3,072 H100s, zbv pp 16).
        `keys`: the x variables' (run, stage, mode index), x's indices in `model`; T is
        the variable after them."""
        n = self.inputs.num_layers
        middle = [g for g, run in enumerate(runs) if run.first == 1 and run.count == n - 2]
        if not self._detours or not middle:
            return
        t = len(keys)
        blocks = [(s, j) for j, (g, s, _) in enumerate(keys) if g == middle[0]]
        hull = self.inputs.schedule == "interleaved-1f1b"
        for row in self._detours:
            beta, alpha = (row.beta, row.alpha) if hull else row.chords()
            pieces = row.pieces if hull else ()
            ys = [model.var(0.0, INF) for _ in pieces]
            top = [(s, j) for s, j in blocks if alpha[s]]
            model.row(
                beta,
                INF,
                [t, *(j for _, j in top), *ys],
                [1.0, *(-alpha[s] for s, _ in top), *(-1.0 for _ in ys)],
            )
            for piece, y in zip(pieces, ys, strict=True):
                on = [(s, j) for s, j in blocks if piece.delta[s]]
                at = [y, *(j for _, j in on)]
                # y - u z >= c, then y - v z >= -v z0
                model.row(piece.c, INF, at, [1.0, *(-piece.u * piece.delta[s] for s, _ in on)])
                model.row(
                    -piece.v * piece.z0,
                    INF,
                    at,
                    [1.0, *(-piece.v * piece.delta[s] for s, _ in on)],
                )

    def count_run(self, run: int) -> None:
        """Rows lo <= (layers of `run` on rank r) <= hi, one per rank, then one per stage,
        for branching on them (set_count_bounds); free until bounds are set."""
        if self._counted == run and self._count_rows:
            return  # the rows are in already (the probing phase, then branching)
        self._counted = run
        self._count_rows = []
        rank_of = self.inputs.stage_rank
        # the run's variables of each rank, then of each stage, in the order of self.x
        groups: list[list[pywraplp.Variable]] = [
            [] for _ in range(self.inputs.pp + self.inputs.num_stages)
        ]
        for (g, s, _), var in self.x.items():
            if g == run:
                groups[rank_of[s]].append(var)
                groups[self.inputs.pp + s].append(var)
        for variables in groups:
            row = self.solver.Constraint(0.0, self.solver.infinity())
            for var in variables:
                row.SetCoefficient(var, 1.0)
            self._count_rows.append(row)
        self._held_bounds = [None] * len(self._count_rows)

    def set_count_bounds(self, bounds: tuple[tuple[int, int], ...]) -> None:
        """(lo, hi) for the counted run's layers per rank, then per stage (count_run
        first)."""
        self._count_bounds = bounds
        held = self._held_bounds  # each row's bounds in the model: set only those that move
        for k, (row, (lo, hi)) in enumerate(zip(self._count_rows, bounds, strict=False)):
            if held[k] != (lo, hi):
                row.SetBounds(float(lo), float(hi))
                held[k] = (lo, hi)

    def add_cut(self, cut: PathCut) -> bool:
        """T >= the path's length (each boundary it crosses at the cheapest p2p). False if the
        cut is already in."""
        if not self._pooled(cut):
            return False
        self._hold(len(self._cuts) - 1)
        return True

    def _pooled(self, cut: PathCut) -> bool:
        """Into the pool; False if it is in already."""
        if cut in self._seen:
            return False
        self._seen.add(cut)
        self._cuts.append(cut)
        self._pool.add(*self._cut_row(cut))
        return True

    def _cut_row(self, cut: PathCut) -> tuple[float, list[int], list[float]]:
        """The cut's row T - sum_j a_j x_j >= constant as (constant, the x indices j, their
        coefficients -a_j), zero coefficients left out."""
        inp = self.inputs
        constant = sum(cut.x) * self._p2p
        if any(inp.stage_overhead_s):  # without per-action overhead its length is 0.0
            constant = cut.length_s(inp.overhead_durations) + constant
        f = cut.f
        weight = [b + w for b, w in zip(cut.b, cut.w, strict=True)]
        grad = [b + i for b, i in zip(cut.b, cut.i, strict=True)]
        at, coefficients = [], []
        for j, (s, fw, bw_weight, bw_input) in enumerate(self._terms):
            v = f[s] * fw + weight[s] * bw_weight
            v += grad[s] * bw_input
            if v:
                at.append(j)
                coefficients.append(-v)
        return constant, at, coefficients

    def _hold(self, i: int) -> None:
        """Pool cut i's row into the model."""
        constant, at, coefficients = self._pool.row(i)
        row = self.solver.Constraint(constant, self.solver.infinity())
        row.SetCoefficient(self.t, 1.0)
        coefficient, variables = row.SetCoefficient, self._vars
        for j, a in zip(at, coefficients, strict=True):
            coefficient(variables[j], a)
        self._held.append(i)
        self._pool.tight_at[i] = self._solves

    def solve(self) -> LpPoint | None:
        """The LP optimum over every cut given (value inf if the LP is infeasible: nothing
        fits), or None. Pool cuts the optimum violates go into the model and it is solved
        again until none does; then the model drops its long-slack rows where it holds many
        (PoolPolicy)."""
        while True:
            code = self._solve_model()
            if code == pywraplp.Solver.INFEASIBLE:
                return LpPoint(float("inf"), ())
            if code != pywraplp.Solver.OPTIMAL:
                return None
            # every variable's value in one call (per-variable reads cost a call each)
            solution = linear_solver_pb2.MPSolutionResponse()
            self.solver.FillSolutionResponseProto(solution)
            values = solution.variable_value
            t = values[len(self._terms)]  # T, the variable after x
            lengths = self._pool.lengths(values)
            violated = self._pool.violated(lengths, t, self._held)
            if not violated:
                break
            for i in violated:
                self._hold(i)
        self._solves += 1
        self._pool.mark_tight(lengths, t, self._held, self._solves)
        point = self._point(values, solution.objective_value, t)
        stale = self._pool.stale(self._held, self._solves - self.policy.keep_solves)
        if len(stale) > self.policy.compact_rows:
            dropped = set(stale)
            self._held = [i for i in self._held if i not in dropped]
            self._build()
        return point

    def _solve_model(self) -> int:
        """GLOP's result code. A solve that ends neither OPTIMAL nor INFEASIBLE (an unscaled
        solve at its iteration limit; GLOP's warm re-solve after many added rows sometimes
        ends ABNORMAL: 18.4B, pp = 2 interleaved vpp = 12, ~140 cuts) is redone once on the
        model rebuilt, solved cold with scaling."""
        code = self.solver.Solve()
        if code not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.INFEASIBLE):
            self._parameters = GLOP_PARAMETERS
            self._build()
            code = self.solver.Solve()
        return int(code)

    def _point(self, values: Sequence[float], value_s: float, makespan_s: float) -> LpPoint:
        inputs = self.inputs
        n_st = inputs.num_stages
        layers = [0.0] * n_st
        counts = [0.0] * inputs.pp
        run_layers = [0.0] * n_st
        o_f, o_b, o_w = inputs.stage_overhead_s
        fw, bw, w = [o_f] * n_st, [o_b] * n_st, [o_w] * n_st
        for (g, s, _), (_, f_s, w_s, i_s), v in zip(self._keys, self._terms, values, strict=False):
            layers[s] += v
            fw[s] += v * f_s
            bw[s] += v * (i_s + w_s)
            w[s] += v * w_s
            if g == self._counted:
                counts[inputs.stage_rank[s]] += v
                run_layers[s] += v
        durations = StageDurations(
            fw_s=tuple(fw), bw_s=tuple(bw), w_s=tuple(w), p2p_s=(self._p2p,) * max(0, n_st - 1)
        )
        return LpPoint(
            value_s, tuple(layers), tuple(counts), tuple(run_layers), makespan_s, durations
        )


class _Pool:
    """Every cut row of a CutLP: T >= constant + sum_j a_j x_j, kept as (constant, the x
    indices j, -a_j) for building the model and as a dense matrix of a for checking a point
    against all of them at once; `tight_at[i]`: the last solve at which row i was tight or
    went into the model."""

    def __init__(self, tight: float) -> None:
        self.tight = tight
        self.width = 0  # x variables
        self.rows: list[tuple[float, list[int], list[float]]] = []
        self._a = np.zeros((0, 0))
        self._c = np.zeros(0)
        self.tight_at = np.zeros(0, dtype=np.int64)

    def add(self, constant: float, at: list[int], coefficients: list[float]) -> None:
        n = len(self.rows)
        if n == len(self._c):  # grow by doubling
            size = max(16, 2 * n)
            a, c, tight = np.zeros((size, self.width)), np.zeros(size), np.zeros(size, np.int64)
            if n:
                a[:n], c[:n], tight[:n] = self._a[:n], self._c[:n], self.tight_at[:n]
            self._a, self._c, self.tight_at = a, c, tight
        self.rows.append((constant, at, coefficients))
        self._c[n] = constant
        self._a[n, at] = [-v for v in coefficients]

    def row(self, i: int) -> tuple[float, list[int], list[float]]:
        return self.rows[i]

    def lengths(self, values: Sequence[float]) -> np.ndarray:
        """Every row's right-hand side at the point (x = the first `width` values)."""
        n = len(self.rows)
        x = np.fromiter(values, float, count=self.width)
        out: np.ndarray = self._c[:n] + self._a[:n] @ x
        return out

    def violated(self, lengths: np.ndarray, t: float, held: list[int]) -> list[int]:
        """The rows above T (by more than `tight`) that the model does not hold."""
        over = lengths > t + self.tight * abs(t)
        over[held] = False
        return [int(i) for i in np.flatnonzero(over)]

    def mark_tight(self, lengths: np.ndarray, t: float, held: list[int], solve: int) -> None:
        tight = lengths >= t - self.tight * abs(t)
        mine = np.zeros(len(lengths), bool)
        mine[held] = True
        self.tight_at[: len(lengths)][tight & mine] = solve

    def stale(self, held: list[int], before: int) -> list[int]:
        """The held rows last tight before solve `before`."""
        at = self.tight_at[held]
        return [i for i, k in zip(held, at.tolist(), strict=True) if k < before]


def rounded_bounds(stage_layers: tuple[float, ...], num_layers: int) -> tuple[int, ...]:
    """Stage boundaries nearest to fractional layer counts: each boundary is the rounded
    cumulative count, kept inside [previous + 1, num_layers - stages after it]."""
    n_st = len(stage_layers)
    bounds = [0]
    cum = 0.0
    for s in range(n_st - 1):
        cum += stage_layers[s]
        hi = num_layers - (n_st - 1 - s)
        bounds.append(max(bounds[-1] + 1, min(hi, round(cum))))
    bounds.append(num_layers)
    return tuple(bounds)
