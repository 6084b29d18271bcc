"""Where per-layer costs come from: the analytic catalog or a ModelProfile.

`resolve_costs(request)` returns a CostSource: the model's layer list and, for any
(micro_batch_size, tp, sequence_parallel, cp, ep, etp), one LayerCost per layer (cached per
point). `cp_comm` is not part of the point: how the K/V travel changes only the
communication the cost model adds (planner.cost.inputs), not a layer's own costs.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.catalog.efficiency import DEFAULT_EFFICIENCY, Efficiency
from planner.catalog.models import analytic_costs, analytic_expert_floors, layer_refs
from planner.catalog.moe_work import DEFAULT_ROUTING, RoutingTerms
from planner.catalog.ring_attention import ring_attention_for
from planner.errors import SpecError
from planner.specs.model import NO_OVERHEAD, ActionOverhead, LayerCost, LayerRef, ModelArch
from planner.specs.request import PlanRequest

_Key = tuple[int, int, bool, int, int, int]  # (mbs, tp, sp, cp, ep, etp)
_Point = tuple[int, int, bool, int]  # (mbs, tp, sp, cp)


class CostSource:
    """The model's layers and their costs at any point, analytic or interpolated from a profile."""

    def __init__(
        self,
        *,
        layers: tuple[LayerRef, ...],
        kind_costs: Callable[[_Key], dict[str, LayerCost]],
        origin: str,
        arch: ModelArch | None = None,
        action_overhead: ActionOverhead = NO_OVERHEAD,
        expert_floors: Callable[[_Point], dict[str, tuple[float, float, float]]] | None = None,
    ) -> None:
        self.layers = layers
        self.origin = origin  # "analytic" or "profile"
        self.arch = arch
        # the pipeline runtime's fixed time per action: the profile's measurement; 0 for the
        # analytic catalog (no published per-action figure for a GPU runtime is used)
        self.action_overhead = action_overhead
        self._kind_costs = kind_costs
        # per MoE layer kind, its (fw, bw_input, bw_weight) floors over ep and etp; None
        # where no kind reads ep or etp (a dense model, a profile)
        self._expert_floors = expert_floors
        self._cache: dict[_Key, tuple[LayerCost, ...]] = {}
        self._floors: dict[_Point, tuple[LayerCost, ...]] = {}
        self._split: dict[_Key, bool] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(layer.kind for layer in self.layers))

    def layer_costs(
        self,
        *,
        micro_batch_size: int,
        tp: int,
        sequence_parallel: bool,
        cp: int = 1,
        ep: int = 1,
        etp: int = 1,
    ) -> tuple[LayerCost, ...]:
        """One LayerCost per layer (in `layers` order) at this point; cached."""
        key = (micro_batch_size, tp, sequence_parallel, cp, ep, etp)
        cached = self._cache.get(key)
        if cached is None:
            by_kind = self._kind_costs(key)
            cached = tuple(by_kind[layer.kind] for layer in self.layers)
            self._cache[key] = cached
        return cached

    def floor_costs(
        self, *, micro_batch_size: int, tp: int, sequence_parallel: bool, cp: int = 1
    ) -> tuple[LayerCost, ...]:
        """One LayerCost per layer whose fw_s, bw_input_s and bw_weight_s (and split_costs)
        are at most the layer's at every (ep, etp) of this point, the rest as at ep = etp
        = 1: those costs themselves where no layer reads ep or etp, else with each MoE
        kind's three times replaced by its floors (planner.catalog.models.
        analytic_expert_floors). Cached; raises as layer_costs does."""
        key = (micro_batch_size, tp, sequence_parallel, cp)
        cached = self._floors.get(key)
        if cached is None:
            costs = self.layer_costs(
                micro_batch_size=micro_batch_size, tp=tp, sequence_parallel=sequence_parallel, cp=cp
            )
            floors = self._expert_floors(key) if self._expert_floors is not None else {}
            of_kind = {layer.kind: c for layer, c in zip(self.layers, costs, strict=True)}
            by_kind: dict[str, LayerCost] = {}
            for kind, (fw, bw_input, bw_weight) in floors.items():
                by_kind[kind] = of_kind[kind].model_copy(  # (analytic costs have no split fields)
                    update={"fw_s": fw, "bw_input_s": bw_input, "bw_weight_s": bw_weight}
                )
            cached = tuple(
                by_kind.get(layer.kind, c) for layer, c in zip(self.layers, costs, strict=True)
            )
            self._floors[key] = cached
        return cached

    def split_backward_differs(
        self,
        *,
        micro_batch_size: int,
        tp: int,
        sequence_parallel: bool,
        cp: int = 1,
        ep: int = 1,
        etp: int = 1,
    ) -> bool:
        """Whether some layer's split-backward (I, W) differ from its full backward's parts
        at this point (LayerCost.split_costs: a measured profile's own); cached."""
        key = (micro_batch_size, tp, sequence_parallel, cp, ep, etp)
        known = self._split.get(key)
        if known is None:
            costs = self.layer_costs(
                micro_batch_size=micro_batch_size,
                tp=tp,
                sequence_parallel=sequence_parallel,
                cp=cp,
                ep=ep,
                etp=etp,
            )
            distinct = {id(c): c for c in costs}.values()  # a kind's layers share one object
            known = any(c.split_costs() != (c.bw_input_s, c.bw_weight_s) for c in distinct)
            self._split[key] = known
        return known


def request_efficiency(request: PlanRequest) -> Efficiency:
    """The cost-model constants of a request: its calibration's, else the catalog defaults.

    Raises SpecError(field="calibration.constants") for a calibration given only by id: the
    service must load it and put its constants inline before planning.
    """
    cal = request.calibration
    if cal is None:
        return DEFAULT_EFFICIENCY
    if cal.constants is None:
        raise SpecError(
            "calibration.constants",
            cal.id,
            "a stored calibration must be resolved by the service (its constants given "
            "inline) before the cost model can use it",
        )
    return Efficiency.from_dict(cal.constants)


def resolve_costs(
    request: PlanRequest,
    *,
    efficiency: Efficiency | None = None,
    routing: RoutingTerms = DEFAULT_ROUTING,
) -> CostSource:
    """The CostSource of a request: its architecture (analytic) or its inline profile.
    `efficiency` defaults to the request's (`request_efficiency`); `routing` is how far real
    routing departs from balanced (planner.catalog.moe_work.RoutingTerms) for MoE layers.

    Raises SpecError(field="model.profile_id") for a profile given only by id: the service
    must load it and put it inline before planning.
    """
    eff = efficiency if efficiency is not None else request_efficiency(request)
    profile = request.profile
    if profile is not None:
        prof = profile

        def from_profile(key: _Key) -> dict[str, LayerCost]:
            mbs, tp, sp, cp, ep, etp = key
            if cp > 1 or ep > 1 or etp > 1:
                field = "candidate.cp" if cp > 1 else "candidate.ep" if ep > 1 else "candidate.etp"
                raise SpecError(
                    field,
                    max(cp, ep, etp),
                    "a measured profile is measured at cp = ep = etp = 1 and cannot be "
                    "scaled to context or expert parallelism; plan with the model's "
                    "architecture (the analytic catalog) instead",
                )
            return {
                kind: prof.cost(kind, micro_batch_size=mbs, tp=tp, sequence_parallel=sp)
                for kind in dict.fromkeys(layer.kind for layer in prof.layers)
            }

        return CostSource(
            layers=prof.layers,
            kind_costs=from_profile,
            origin="profile",
            arch=prof.arch,
            action_overhead=prof.action_overhead_s,
        )
    if isinstance(request.model, ModelArch):
        arch = request.model
        gpu = request.cluster.device
        training = request.training
        # the context-parallel attention the request's framework runs (torchtitan: torch's)
        ring = ring_attention_for(request.constraints.framework)

        def from_arch(key: _Key) -> dict[str, LayerCost]:
            mbs, tp, sp, cp, ep, etp = key
            return analytic_costs(
                arch,
                gpu=gpu,
                dtype=training.dtype,
                seq_length=training.seq_length,
                micro_batch_size=mbs,
                tp=tp,
                sequence_parallel=sp,
                cp=cp,
                ep=ep,
                etp=etp,
                efficiency=eff,
                routing=routing,
                ring=ring,
            )

        def expert_floors(point: _Point) -> dict[str, tuple[float, float, float]]:
            mbs, tp, sp, cp = point
            return analytic_expert_floors(
                arch,
                gpu=gpu,
                dtype=training.dtype,
                seq_length=training.seq_length,
                micro_batch_size=mbs,
                tp=tp,
                sequence_parallel=sp,
                cp=cp,
                efficiency=eff,
                routing=routing,
                ring=ring,
            )

        return CostSource(
            layers=layer_refs(arch),
            kind_costs=from_arch,
            origin="analytic",
            arch=arch,
            expert_floors=expert_floors if arch.moe is not None else None,
        )
    raise SpecError(
        "model.profile_id",
        request.model.profile_id,
        "a stored profile must be resolved by the service (loaded and given inline as "
        "model.profile) before the cost model can use it",
    )
