"""A plan whose decoder blocks mix recompute modes says so in its JSON, its page and the CLI,
also when it was stored before the summary existed (then it said the predominant mode)."""

from __future__ import annotations

import re
from typing import Any

from svc_factories import evaluated_result, tiny_request
from svc_harness import Api

from api.store.db import session_scope
from api.store.plans import insert_plan

# tiny_request: embedding, 4 decoder blocks, head = 6 layers over pp=2 stages; the blocks
# (layers 1..4) are selective, none, full, none
MIXED = {
    "tp": 1,
    "pp": 2,
    "dp": 2,
    "schedule": "1f1b",
    "micro_batch_size": 1,
    "stages": [
        {"layers": [0, 3], "recompute": ["none", "selective", "none"]},
        {"layers": [3, 6], "recompute": ["full", "none", "none"]},
    ],
}
MIXED_BLOCKS = {"none": 2, "selective": 1, "full": 1}


def _store(api: Api, result: dict[str, Any]) -> str:
    with session_scope(api.app.state.meshplan.sessions) as session:
        row = insert_plan(
            session,
            tenant="acme",
            request_hash="r" * 64,
            request=tiny_request(),
            result=result,
            tags=[],
        )
        return row.id


def _as_stored_before(result: dict[str, Any]) -> dict[str, Any]:
    """The result as the service stored it before `recompute_blocks` and `gpus_per_node`."""
    plan = {
        k: v for k, v in result["plan"].items() if k not in ("recompute_blocks", "gpus_per_node")
    }
    return {**result, "plan": {**plan, "recompute": "none"}}


def test_mixed_plan_json_says_mixed_with_counts(api: Api) -> None:
    plan_id = _store(api, evaluated_result(tiny_request(), MIXED))
    plan = api.client.get(f"/v1/plans/{plan_id}", headers=api.acme).json()["result"]["plan"]
    assert plan["recompute"] == "mixed"
    assert plan["recompute_blocks"] == MIXED_BLOCKS
    assert plan["gpus_per_node"] == 4


def test_uniform_plan_names_its_mode(api: Api) -> None:
    cand = {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b", "recompute": "full"}
    plan_id = _store(api, evaluated_result(tiny_request(), cand))
    plan = api.client.get(f"/v1/plans/{plan_id}", headers=api.acme).json()["result"]["plan"]
    # the analytic embedding and head never recompute; the 4 blocks all do
    assert plan["recompute"] == "full" and plan["recompute_blocks"] == {"full": 4}


def test_plan_stored_before_the_summary_is_summarised_on_read(api: Api) -> None:
    old = _as_stored_before(evaluated_result(tiny_request(), MIXED))
    assert old["plan"]["recompute"] == "none" and "recompute_blocks" not in old["plan"]
    plan_id = _store(api, old)
    doc = api.client.get(f"/v1/plans/{plan_id}", headers=api.acme).json()
    assert doc["result"]["plan"]["recompute"] == "mixed"
    assert doc["result"]["plan"]["recompute_blocks"] == MIXED_BLOCKS
    # what reads the stored plan through the model (launch, timeline) still accepts it
    r = api.client.get(f"/v1/plans/{plan_id}/launch", params={"nodes": 1}, headers=api.acme)
    assert r.status_code == 200, r.text
    r = api.client.get(f"/v1/plans/{plan_id}/timeline.svg", headers=api.acme)
    assert r.status_code == 200


def test_page_shows_mixed_and_the_counts(api: Api) -> None:
    for result in (
        evaluated_result(tiny_request(), MIXED),
        _as_stored_before(evaluated_result(tiny_request(), MIXED)),
    ):
        plan_id = _store(api, result)
        r = api.client.get(f"/plans/{plan_id}", headers=api.acme)
        assert r.status_code == 200, r.text
        cell = re.search(r'<td id="recompute">(.*?)</td>', r.text, re.S)
        assert cell is not None
        assert cell.group(1) == "mixed (decoder blocks: 2 none, 1 selective, 1 full)"
