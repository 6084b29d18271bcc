"""Objective bubble drops a configuration only where another has exactly its costs: under a
framework that cannot mix recompute modes, selective recompute where it costs what none costs
(Llama's attention under flash attention) is the same configuration twice."""

from __future__ import annotations

from planner.cost import partition_inputs, resolve_costs
from planner.search.dominance import mark_same_costs
from planner.search.outcome import Entry
from planner.search.space import Config, enumerate_configs

from .helpers import GPT_13B, LLAMA, framework_request


def _twins(model: dict[str, object]) -> list[Entry]:
    """Entries of one megatron configuration under each uniform recompute mode."""
    request = framework_request("megatron", model)
    src = resolve_costs(request)
    base = next(c for c in enumerate_configs(request, num_layers=len(src.layers)) if c.pp > 1)
    out = []
    for modes in (("none",), ("selective",), ("full",)):
        cfg: Config = base._replace(modes=modes)
        inputs = partition_inputs(request, cfg.candidate(), source=src)
        out.append(Entry(cfg, inputs, 0.0, 0.0))
    return out


def test_selective_costing_what_none_costs_is_dropped_once() -> None:
    none, selective, full = _twins(LLAMA)
    assert none.inputs.bw_input_s[1][0] == none.inputs.bw_input_s[1][1]  # the premise
    mark_same_costs([none, selective, full])
    verdicts = sorted(e.verdict for e in (none, selective))
    assert verdicts == ["dominated", "pending"]
    assert full.verdict == "pending"  # full recompute costs more: another configuration


def test_selective_that_saves_bytes_is_kept() -> None:
    none, selective, full = _twins(GPT_13B)
    assert none.inputs.activation_bytes[1][1] < none.inputs.activation_bytes[1][0]  # premise
    mark_same_costs([none, selective, full])
    assert [e.verdict for e in (none, selective, full)] == ["pending"] * 3
