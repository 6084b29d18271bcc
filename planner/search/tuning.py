"""The search's tuned constants: how it shares its time limit and how far each phase goes.

One frozen `SearchTuning` is passed from `driver.run_search` down to every phase of
planner.search.exact; `TUNING` holds the values the service, the CLI and the benches use. None
of them changes what is proven (every bound stays valid whatever they are); they decide how
soon, and what a search cut by its limit has found. docs/search.md, "Tuning and the time
budget", states the resulting budget policy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchTuning:
    """Shares are fractions of the request's time limit (or of the time left, where said).

    Across configurations (planner.search.driver):
    - `sweep_share`: the heuristic sweep over groups, at most, before the exact phase starts;
      `resweep_factor` x that share of the time left for each later sweep of the groups the
      first one did not reach.
    - `config_share` (at least `config_min_s`): one configuration in the exact phase's first
      pass; `incumbent_cap` x that for the incumbent's configuration (its proof is needed
      whatever comes). Configurations cut short are solved again with all the time left.
    - `settle_share`: of the first pass's cap, what each configuration no heuristic partition
      fits gets before the first pass (its cheap phases: most have nothing that fits).
    - `far_share`, `far_within`: once the first pass has used `far_share` of the limit, the
      configurations whose heuristics are more than `far_within` above the incumbent get
      their cheap phases (driver._far_pass, within `settle_share` of the cap each) before
      it goes on, and it goes on lowest floor first (what holds the bound at the limit).
    - `interim_gap` (objective time): once the far pass has run, the first pass's remaining
      configurations, and then every one it left unproven, are solved against the incumbent
      / (1 + interim_gap) (driver._interim_pass) before the second pass's exact proofs:
      a search that cannot prove its optimum in time still proves a gap of about this much
      (or the request's gap_tolerance, where wider): 0.4 %, inside the 0.5 % that the
      planning benchmark asks of a search its limit cuts short.
    - `improve_share`: of the time left, the improve pass (every configuration's hints and
      hill climb, lowest floor first).
    - `reserve_share` (at most `reserve_s`): kept before the limit for the work under way
      when it is reached (a model built, a group's floors).
    - `alternatives_share`, `alternative_tries`: the alternatives pass (top_k), at most that
      share of the limit and that many configurations scored per alternative asked.
    - `progress_every_s`: seconds of the search's clock between two progress reports, and
      at least between two full checks of search.gap_tolerance; `gap_check_share`: the
      most of the search's clock those checks may take (each waits its cost / the share).
    - `cut_floors_share`: of the time left when the sweep is cut short with an incumbent,
      what the unswept groups' floors may use, the best-first pass included
      (driver._memory_floors_of); `least_first_share`: what the best-first pass
      (sweep_floors.least_first) may use, alone (it stops where it finds the group that holds the
      bound of the unswept groups).
    - `finish_slack_s`: seconds past search.time_limit_s in which the final bound may still
      compute the work floors of groups never swept (one cost-model call per work kind not
      yet seen); past it, such a group counts only a floor already known (else 0, still a
      valid bound). A search that has an incumbent ends by then, plus one group's floors.

    One configuration (planner.search.exact):
    - `lp_rounds`: cutting-plane rounds on the LP relaxation before anything else;
      `lp_shift_rounds` of them also simulate rank shifts (the incumbent's polish call only).
    - `lp_stall`, `lp_stall_within`: the cutting-plane rounds of a configuration visited
      without polish stop after a round that raised the LP floor by less than `lp_stall` of
      the gap it had left to the bound, where the configuration's best partition is at most
      `lp_stall_within` above the bound (0: never). There the paths known are those of
      near-optimal partitions and what the LP lacks is integrality, which probing and
      branching supply; where the best is further off, the rounds' neighbours are how the
      configuration's paths are learnt, and they run on.
    - `lp_separate_solves`: LP solves of the cutting planes at the LP's own optimum
      (exact.separate_lp), at most; in a configuration's first proving call also at most
      `lp_action_budget` / (its schedule's actions + stages x layers)
      (exact.separate_solves). `lp_separate_core`: each separate_lp solve also adds the
      critical path at the durations (1 - share) x the LP optimum's + share x the
      configuration's best partition's, where the optimum breaks it (0: the optimum's own
      path only, Kelley's method). A cut found between the two cuts off more of the LP's
      region than the optimum's own, and the LP's value does not creep up a sliver per
      solve. `lp_separate_far`, `lp_separate_far_within`: a first call's separation gets
      `lp_separate_solves` too where the LP floor lies at most `lp_separate_far_within` (a
      fraction of the bound) below the bound and the configuration's best partition at least
      `lp_separate_far` times further above it (exact.floor_is_the_proof; 0: never).
    - `lp_max_cells`: stages x layers above which no LP is built.
    - `lp_moves` (at least) neighbours simulated per LP round, or as many as keep
      moves x schedule actions under `lp_action_budget`.
    - `probe_solves`, `probe_share` (of the configuration's time left): the probing phase.
    - `branch_solves`, `branch_rounds` (cutting-plane rounds per node), `branch_share`: the
      block-count branching phase. `branch_solves_own` caps `branch_solves` where the
      configuration holds the partition that sets the bound (its best is at or below
      `bound_s`: the incumbent's own configuration): every node holding that partition has
      an LP floor at most its time, so it closes only where the LP is within the proof
      tolerance of it there, and the branching's part is mostly the hull and floor it hands
      CP-SAT, which a few solves already narrow. `branch_vectors`: where the root's per-rank
      block-count vectors below the bound are at most this many, its first split is one child
      per vector (exact.vector_children; below 2: never).
    - `model_build_s`: estimated seconds per path cut and stage to build (and to load) a
      CP-SAT model; a model is not built with less than `model_build_margin` x that left.
    - `descend_rounds`: improving steps of the hill climb, at most (each phase of it).
    - `descend_within`: the hill climb (outside the incumbent's polish) runs from a
      configuration's best hint only where that hint is at most this fraction above the
      incumbent (exact._worth_climbing); the others are left to the floors and the LP.
    - `mode_lighter`: layers of one stage made one mode lighter at once by a mode move.
    - `tie_solves`: CP-SAT solves of objective bubble's tie phase (exact.tie_phase), at most,
      per configuration: past them the partition kept is the preferred of the ties found.
    - `bubble_floor_rounds`: objective bubble's floor of a configuration
      (planner.search.bubble_floor): LP solves, each adding the critical path of the last
      one's optimum, at most; every round's floor is valid, later ones are higher.
    - `cpu_poll_s`, `cpu_wall_factor`: under a CPU clock (SolveLimits.cpu_clock) a CP-SAT
      solve is stopped once its CPU budget is spent, read every `cpu_poll_s` seconds at most
      as the budget runs out (model.solve_on_cpu); CP-SAT's wall-time limit is then
      `cpu_wall_factor` x the budget, a safety net only (model.CpuLimit).
    """

    sweep_share: float = 0.3
    resweep_factor: float = 2.0
    config_share: float = 0.05
    config_min_s: float = 0.5
    incumbent_cap: float = 3.0
    improve_share: float = 0.25
    settle_share: float = 0.05
    far_share: float = 0.5
    far_within: float = 0.05
    interim_gap: float = 0.004
    reserve_share: float = 0.1
    reserve_s: float = 0.1
    alternatives_share: float = 0.1
    alternative_tries: int = 4
    progress_every_s: float = 0.1
    gap_check_share: float = 0.05
    finish_slack_s: float = 0.25
    cut_floors_share: float = 0.1
    least_first_share: float = 0.3
    lp_rounds: int = 10
    lp_shift_rounds: int = 3
    lp_stall: float = 0.05
    lp_stall_within: float = 0.05
    lp_max_cells: int = 20_000
    lp_separate_solves: int = 200
    lp_separate_core: float = 0.5
    lp_separate_far: float = 10.0
    lp_separate_far_within: float = 0.0025
    lp_moves: int = 24
    lp_action_budget: int = 200_000
    probe_solves: int = 400
    probe_share: float = 0.3
    branch_solves: int = 600
    branch_solves_own: int = 100
    branch_rounds: int = 3
    branch_vectors: int = 64
    branch_share: float = 0.3
    model_build_s: float = 1e-5
    model_build_margin: float = 2.0
    descend_rounds: int = 24
    descend_within: float = 0.02
    mode_lighter: int = 2
    tie_solves: int = 100
    bubble_floor_rounds: int = 20
    cpu_poll_s: float = 0.005
    cpu_wall_factor: float = 10.0

    def __post_init__(self) -> None:
        shares = {
            "sweep_share": self.sweep_share,
            "config_share": self.config_share,
            "improve_share": self.improve_share,
            "settle_share": self.settle_share,
            "far_share": self.far_share,
            "reserve_share": self.reserve_share,
            "alternatives_share": self.alternatives_share,
            "probe_share": self.probe_share,
            "branch_share": self.branch_share,
            "lp_stall": self.lp_stall,
            "lp_separate_core": self.lp_separate_core,
            "cut_floors_share": self.cut_floors_share,
            "least_first_share": self.least_first_share,
            "interim_gap": self.interim_gap,
        }
        for name, value in shares.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"SearchTuning.{name} = {value} is not a share in [0, 1]")
        counts = {
            "alternative_tries": self.alternative_tries,
            "lp_rounds": self.lp_rounds,
            "lp_shift_rounds": self.lp_shift_rounds,
            "lp_max_cells": self.lp_max_cells,
            "lp_separate_solves": self.lp_separate_solves,
            "lp_moves": self.lp_moves,
            "lp_action_budget": self.lp_action_budget,
            "probe_solves": self.probe_solves,
            "branch_solves": self.branch_solves,
            "branch_solves_own": self.branch_solves_own,
            "branch_rounds": self.branch_rounds,
            "branch_vectors": self.branch_vectors,
            "descend_rounds": self.descend_rounds,
            "mode_lighter": self.mode_lighter,
            "tie_solves": self.tie_solves,
            "bubble_floor_rounds": self.bubble_floor_rounds,
        }
        for name, count in counts.items():
            if count < 0:
                raise ValueError(f"SearchTuning.{name} = {count} is negative")
        positive = {
            "descend_within": self.descend_within,
            "lp_stall_within": self.lp_stall_within,
            "far_within": self.far_within,
            "resweep_factor": self.resweep_factor,
            "config_min_s": self.config_min_s,
            "incumbent_cap": self.incumbent_cap,
            "reserve_s": self.reserve_s,
            "progress_every_s": self.progress_every_s,
            "finish_slack_s": self.finish_slack_s,
            "model_build_s": self.model_build_s,
            "model_build_margin": self.model_build_margin,
            "lp_separate_far": self.lp_separate_far,
            "lp_separate_far_within": self.lp_separate_far_within,
        }
        for name, value in positive.items():
            if value < 0:
                raise ValueError(f"SearchTuning.{name} = {value} is negative")
        if not 0.0 < self.gap_check_share <= 1.0:
            share = self.gap_check_share
            raise ValueError(f"SearchTuning.gap_check_share = {share} is not in (0, 1]")
        if self.cpu_poll_s <= 0:
            raise ValueError(f"SearchTuning.cpu_poll_s = {self.cpu_poll_s} is not positive")
        if self.cpu_wall_factor < 1:
            raise ValueError(f"SearchTuning.cpu_wall_factor = {self.cpu_wall_factor} is below 1")


TUNING = SearchTuning()
