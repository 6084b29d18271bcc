"""Test data: plan requests, and real plans built with the cost model (no search) so that
history tests can store many rows quickly."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from planner.catalog.models import analytic_profile
from planner.cost import fixed_plan
from planner.plan import PlanResult, SearchStats
from planner.specs import Candidate, PlanRequest
from profiler.models import tiny_arch


def tiny_request(**overrides: Any) -> dict[str, Any]:
    """A small GPT on 4 A100s that the search solves in well under a second."""
    doc: dict[str, Any] = {
        "model": {
            "family": "gpt",
            "name": "tiny-gpt",
            "num_layers": 4,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "vocab_size": 1024,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 4, "gpus_per_node": 4},
        "training": {"global_batch_size": 8, "seq_length": 256},
        "search": {"time_limit_s": 10, "top_k": 2},
    }
    doc.update(overrides)
    return doc


def profile_doc(request_doc: dict[str, Any]) -> dict[str, Any]:
    """An analytic ModelProfile (JSON) of the request's model at a few points."""
    request = PlanRequest.model_validate(request_doc)
    assert request.arch is not None
    prof = analytic_profile(
        request.arch,
        request.cluster,
        request.training,
        [(1, 1, False), (2, 1, False), (1, 2, False)],
    )
    return prof.model_dump(mode="json")


def evaluated_result(request_doc: dict[str, Any], candidate_doc: dict[str, Any]) -> dict[str, Any]:
    """A PlanResult (as JSON) for a fixed candidate, predicted by the real cost model."""
    request = PlanRequest.model_validate(request_doc)
    plan = fixed_plan(request, Candidate.model_validate(candidate_doc))
    result = PlanResult(plan=plan, search=SearchStats(mode="exhaustive", status="OPTIMAL"))
    return result.model_dump(mode="json")


CANDIDATES: tuple[dict[str, Any], ...] = (
    {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"},
    {"tp": 2, "pp": 2, "dp": 1, "schedule": "gpipe"},
    {"tp": 1, "pp": 4, "dp": 1, "schedule": "1f1b"},
    {"tp": 4, "pp": 1, "dp": 1, "schedule": "1f1b"},
    {"tp": 1, "pp": 1, "dp": 4, "schedule": "1f1b"},
    {"tp": 1, "pp": 2, "dp": 1, "vpp": 2, "schedule": "interleaved-1f1b"},
)


def template_results() -> list[dict[str, Any]]:
    """A few distinct real results to vary synthetic history rows over."""
    out = []
    for cand in CANDIDATES:
        req = tiny_request()
        if cand.get("tp", 1) * cand.get("pp", 1) * cand.get("dp", 1) < 4:
            req["cluster"] = {**req["cluster"], "num_gpus": 2, "gpus_per_node": 2}
        out.append((req, evaluated_result(req, cand)))
    return [r for _, r in out]


def synthetic_rows(n: int, *, tenant: str, seed: int = 0) -> list[dict[str, Any]]:
    """`n` plan rows (column dicts for a bulk insert) with varied filter and sort columns."""
    rng = random.Random(seed)
    templates = template_results()
    models = [f"gpt-{k}" for k in range(20)]
    gpus = ["A100-SXM-80GB", "H100-SXM-80GB", "H200-SXM-141GB"]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(n):
        result = templates[i % len(templates)]
        plan = result["plan"]
        step = rng.uniform(0.5, 20.0)
        rows.append(
            {
                "id": f"{i:08d}{rng.getrandbits(64):016x}",
                "tenant": tenant,
                "request_hash": hashlib.sha256(f"{tenant}{i}".encode()).hexdigest(),
                "created_at": t0 + timedelta(seconds=i * 7 + rng.randint(0, 3)),
                "model_name": rng.choice(models),
                "model_hash": plan["model_hash"],
                "gpu": rng.choice(gpus),
                "num_gpus": rng.choice([8, 16, 32, 64, 128, 256, 512]),
                "schedule": plan["schedule"],
                "tp": plan["tp"],
                "pp": plan["pp"],
                "dp": plan["dp"],
                "vpp": plan["vpp"],
                "micro_batch_size": plan["micro_batch_size"],
                "step_time_s": step,
                "tokens_per_s": 1e6 / step,
                "bubble_fraction": plan["prediction"]["bubble_fraction"],
                "peak_memory_bytes": plan["prediction"]["peak_memory_bytes"],
                "search_wall_s": 0.0,
                "tags": [f"team-{i % 5}"],
                "request": {"synthetic": i},
                "result": result,
            }
        )
    return rows


def cpu_request() -> dict[str, Any]:
    """A tiny GPT on 2 CPU ranks (the plan the dev cluster runs end to end)."""
    return {
        "model": json.loads(tiny_arch("gpt").model_dump_json()),
        "cluster": {"gpu": "CPU", "num_gpus": 2},
        "training": {"global_batch_size": 8, "seq_length": 16, "dtype": "fp32"},
        "constraints": {"pp": [2], "micro_batch_sizes": [2], "memory_reserve_gib": 0},
        "search": {"time_limit_s": 5},
    }
