"""Hostile input: every input that once crashed the service or ran for seconds answers a 4xx
problem document naming the field, fast, on SQLite and on PostgreSQL. Plus: GPU names are
normalised to the catalog's, a 405 lists every allowed method, a 500 says `Connection:
close`, and the OpenAPI document has no dangling `$ref` and declares the 400."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import httpx
from svc_factories import tiny_request
from svc_harness import Api, make_settings, new_key, serve

from api.app import create_app

PROBLEM = "application/problem+json"
FAST_S = 1.0  # a refusal does no search: well under a second even on a loaded machine


def set_path(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    *parents, last = dotted.split(".")
    for name in parents:
        node = node.setdefault(name, {})
    node[last] = value
    return out


def post_raw(api: Api, path: str, doc: Any, headers: dict[str, str]) -> httpx.Response:
    """POST `doc` as JSON with \\u escapes (so a lone surrogate survives the encoding)."""
    body = json.dumps(doc, ensure_ascii=True)
    response: httpx.Response = api.client.post(
        path, content=body, headers={**headers, "Content-Type": "application/json"}
    )
    return response


def assert_problem(r: httpx.Response, status: int, field: str, *needles: str) -> dict[str, Any]:
    assert r.status_code == status, r.text[:2000]
    assert r.headers["content-type"].startswith(PROBLEM), r.headers["content-type"]
    doc: dict[str, Any] = r.json()
    fields = [e["field"] for e in doc.get("errors") or []]
    assert any(f == field or f.startswith(field + ".") for f in fields), (field, fields, doc)
    text = json.dumps(doc)
    for needle in needles:
        assert needle in text, (needle, doc)
    return doc


LONE = "\ud800"
# (case, field path in the body, value, expected field in the problem, text the message holds)
PLAN_BODY_CASES: list[tuple[str, str, Any, str, tuple[str, ...]]] = [
    ("surrogate in model.name", "model.name", f"gpt{LONE}x", "body.model", ()),
    ("NUL in model.name", "model.name", "gpt\x00x", "body.model", ("NUL",)),
    ("memory_gib 1e308", "cluster.memory_gib", 1e308, "body.cluster.memory_gib", ("16384",)),
    ("peak_tflops 1e-300", "cluster.peak_tflops", 1e-300, "body.cluster.peak_tflops", ("0.001",)),
    ("peak_tflops 1e300", "cluster.peak_tflops", 1e300, "body.cluster.peak_tflops", ("1000000",)),
    ("intra bw 1e300", "cluster.intra_node_gbps", 1e300, "body.cluster.intra_node_gbps", ()),
    ("inter bw 1e-300", "cluster.inter_node_gbps", 1e-300, "body.cluster.inter_node_gbps", ()),
    (
        "latency 1e300",
        "cluster.inter_node_latency_s",
        1e300,
        "body.cluster.inter_node_latency_s",
        (),
    ),
    ("num_gpus 2**62", "cluster.num_gpus", 2**62, "body.cluster.num_gpus", ()),
    ("num_layers 4096", "model.num_layers", 4096, "body.model", ("2048",)),
    ("hidden 2**40", "model.hidden_size", 2**40, "body.model", ()),
    ("seq_length 2**40", "training.seq_length", 2**40, "body.training.seq_length", ("16777216",)),
    ("batch 2**40", "training.global_batch_size", 2**40, "body.training.global_batch_size", ()),
    ("reserve 1e308", "constraints.memory_reserve_gib", 1e308, "body.constraints", ()),
    ("NUL in gpu", "cluster.gpu", "A100\x00", "body.cluster.gpu", ("NUL",)),
    ("surrogate in gpu", "cluster.gpu", f"A100{LONE}", "body.cluster.gpu", ()),
    (
        "ambiguous gpu",
        "cluster.gpu",
        "80GB",
        "body.cluster.gpu",
        ("A100-SXM-80GB", "H100-SXM-80GB"),
    ),
    ("unknown gpu", "cluster.gpu", "TPUv9", "body.cluster.gpu", ("unknown",)),
    ("20,000 tags", "tags", [f"t{i}" for i in range(20_000)], "body.tags", ("32",)),
    ("long tag", "tags", ["x" * 65], "body.tags", ("64",)),
    ("NUL in tag", "tags", ["a\x00b"], "body.tags", ("NUL",)),
    ("surrogate in tag", "tags", [f"a{LONE}"], "body.tags", ()),
    ("NUL in profile_id", "model", {"profile_id": "p\x00"}, "body.model", ("NUL",)),
]


def test_plan_body_corpus(api: Api) -> None:
    failures = []
    for name, path, value, field, needles in PLAN_BODY_CASES:
        start = time.perf_counter()
        r = post_raw(api, "/v1/plans", set_path(tiny_request(), path, value), api.acme)
        elapsed = time.perf_counter() - start
        try:
            assert_problem(r, 422, field, *needles)
            assert elapsed < FAST_S, f"{elapsed:.2f} s to refuse"
        except AssertionError as exc:
            failures.append(f"{name}: {str(exc)[:500]}")
    assert not failures, "\n".join(failures)
    assert len(PLAN_BODY_CASES) >= 20


def test_malformed_json_is_400(api: Api) -> None:
    r = api.client.post(
        "/v1/plans", content=b'{"model": ', headers={**api.acme, "Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    assert r.json()["title"] == "Malformed JSON"


def test_key_name_with_nul(api: Api) -> None:
    r = post_raw(api, "/v1/keys", {"tenant": "t", "name": "a\x00"}, api.admin)
    assert_problem(r, 422, "body.name", "NUL")


def _measured(plan: dict[str, Any]) -> dict[str, Any]:
    pred = plan["result"]["plan"]["prediction"]
    cand = plan["result"]["plan"]
    return {
        "device": "cpu",
        "backend": "gloo",
        "world_size": cand["tp"] * cand["pp"] * cand["dp"],
        "tp": cand["tp"],
        "pp": cand["pp"],
        "dp": cand["dp"],
        "schedule": cand["schedule"],
        "steps": 2,
        "warmup_steps": 1,
        "step_times_s": [0.5, 0.5],
        "step_time_s": 0.5,
        "bubble_fraction": 0.25,
        "stages": [
            {"stage": s["stage"], "rank": s["rank"], "busy_s": 0.1, "peak_memory_bytes": 1e9}
            for s in pred["stages"]
        ],
    }


RUN_CASES: list[tuple[str, str, Any, str, tuple[str, ...]]] = [
    ("step_time_s 5e-324", "step_time_s", 5e-324, "body.step_time_s", ("1e-09",)),
    ("step_time_s 1e308", "step_time_s", 1e308, "body.step_time_s", ()),
    ("bubble 5e-324", "bubble_fraction", 5e-324, "body.bubble_fraction", ()),
    ("step_times 5e-324", "step_times_s", [5e-324], "body.step_times_s", ()),
    ("NUL in device", "device", "c\x00pu", "body.device", ("NUL",)),
    ("surrogate in schedule", "schedule", LONE, "body.schedule", ()),
    ("NUL in note", "notes", {"k": "\x00"}, "body.notes", ("NUL",)),
]


def test_run_report_corpus(api: Api) -> None:
    plan = api.client.post("/v1/plans", json=tiny_request(), headers=api.acme)
    assert plan.status_code == 201, plan.text
    plan_id = plan.json()["id"]
    good = _measured(plan.json())
    url = f"/v1/plans/{plan_id}/runs"
    tiny_memory = copy.deepcopy(good)
    tiny_memory["stages"][0]["peak_memory_bytes"] = 1e-320
    assert_problem(post_raw(api, url, tiny_memory, api.acme), 422, "body.stages.0")
    for name, path, value, field, needles in RUN_CASES:
        r = post_raw(api, url, set_path(good, path, value), api.acme)
        assert r.status_code == 422, (name, r.text[:500])
        assert_problem(r, 422, field, *needles)
    ok = post_raw(api, url, good, api.acme)
    assert ok.status_code == 201, ok.text
    error = ok.json()["comparison"]["step_time_s"]["error"]
    assert error is not None and abs(error) < 1e300


def test_history_filter_corpus(api: Api) -> None:
    for batch in (8, 16):
        r = api.client.post(
            "/v1/plans",
            json=set_path(tiny_request(), "training.global_batch_size", batch),
            headers=api.acme,
        )
        assert r.status_code == 201, r.text
    first = api.client.get("/v1/plans", params={"page_size": 1}, headers=api.acme)
    token = first.json()["next_page_token"]
    assert token
    cases: list[tuple[str, str, str]] = [
        ("schedule=bogus", "query.schedule", ""),
        ("min_gpus=8&max_gpus=2", "query.min_gpus", "max_gpus=2"),
        ("created_after=2030-01-01T00:00:00Z&created_before=2020-01-01", "query.created_after", ""),
        ("tag=a%00b", "query.tag", "NUL"),
        ("model_name=%00", "query.model_name", "NUL"),
        ("gpu=A%00", "query.gpu", "NUL"),
        ("gpu=TPUv9", "query.gpu", "unknown"),
        ("gpu=80GB", "query.gpu", "H100-SXM-80GB"),
        ("tp=1&tp=2", "query.tp", "2 times"),
        ("sort=-created_at&sort=step_time_s", "query.sort", ""),
        ("page_token=%21%21not-a-token", "query.page_token", ""),
        ("page_token=e30", "query.page_token", ""),
        (f"page_size=1&page_token={token}&schedule=1f1b", "query.page_token", "other filters"),
        (f"page_size=1&page_token={token}&sort=step_time_s", "query.page_token", ""),
    ]
    for query, field, needle in cases:
        r = api.client.get(f"/v1/plans?{query}", headers=api.acme)
        assert r.status_code == 422, (query, r.text[:500])
        assert_problem(r, 422, field, *([needle] if needle else []))
    # the same token with its own filters continues the listing
    second = api.client.get(f"/v1/plans?page_size=1&page_token={token}", headers=api.acme)
    assert second.status_code == 200
    assert second.json()["data"][0]["id"] != first.json()["data"][0]["id"]


def test_nul_in_path(api: Api) -> None:
    for path in ("/v1/plans/a%00b", "/v1/jobs/%00", "/v1/profiles/%00"):
        assert_problem(api.client.get(path, headers=api.acme), 422, "path", "NUL")


def test_gpu_names_normalised(api: Api) -> None:
    spellings = ["A100", "A100-80GB", "a100 sxm 80gb", "A100-SXM-80GB"]
    ids = set()
    for i, gpu in enumerate(spellings):
        r = api.client.post(
            "/v1/plans", json=set_path(tiny_request(), "cluster.gpu", gpu), headers=api.acme
        )
        assert r.status_code == (201 if i == 0 else 200), (gpu, r.text[:500])
        assert r.json()["request"]["cluster"]["gpu"] == "A100-SXM-80GB"
        ids.add(r.json()["id"])
    assert len(ids) == 1  # one cache entry for every spelling
    for gpu in spellings:
        listed = api.client.get("/v1/plans", params={"gpu": gpu}, headers=api.acme).json()
        assert [p["id"] for p in listed["data"]] == list(ids)
        assert listed["data"][0]["gpu"] == "A100-SXM-80GB"


def test_405_lists_every_method(api: Api) -> None:
    r = api.client.delete("/v1/plans", headers=api.acme)
    assert r.status_code == 405 and r.headers["content-type"].startswith(PROBLEM)
    allowed = {m.strip() for m in r.headers["allow"].split(",")}
    assert {"GET", "POST"} <= allowed


def test_openapi_has_no_dangling_refs_and_declares_400(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                refs.append(ref)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    assert refs
    for ref in refs:
        target: Any = doc
        assert ref.startswith("#/"), ref
        for part in ref[2:].split("/"):
            assert isinstance(target, dict) and part in target, f"dangling {ref}"
            target = target[part]
    post = doc["paths"]["/v1/plans"]["post"]
    assert "400" in post["responses"]
    with_body = [
        op for item in doc["paths"].values() for op in item.values() if "requestBody" in op
    ]
    assert with_body and all("400" in op["responses"] for op in with_body)


def test_500_closes_the_connection(tmp_path: Path) -> None:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'c.db'}"))

    async def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/boom", boom)
    with serve(app) as live, httpx.Client(base_url=live.url) as client:
        r = client.get("/boom")
        assert r.status_code == 500
        assert r.headers["connection"] == "close"
        assert r.headers["content-type"].startswith(PROBLEM)
        assert "a bug" not in r.text
        # the client's next request on the same pool succeeds
        assert client.get("/healthz").status_code == 200


def test_corpus_uses_a_real_key(api: Api) -> None:
    """The corpus' 422s come from validation, not from the key: a valid request passes."""
    key = new_key(api.client, "hostile")
    r = api.client.post("/v1/plans", json=tiny_request(), headers=key)
    assert r.status_code == 201, r.text
