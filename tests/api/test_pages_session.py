"""The page session and the planning form over HTTP (TestClient on SQLite and PostgreSQL):
the cookie a `?key=` visit leaves, what it may reach (the /v1 GETs the pages link to, one
tenant's), what it may not (unsafe /v1 requests), CSRF, field errors, the progress page,
gzip, folded tables and the alternative pages."""

from __future__ import annotations

import gzip
import html
import re
import time
from typing import Any

from fastapi.testclient import TestClient
from svc_factories import evaluated_result, tiny_request
from svc_harness import Api

from api.auth import COOKIE
from api.pages.views import INLINE_SVG_CHARS
from api.store.db import session_scope
from api.store.jobs import claim, finish
from api.store.plans import insert_plan
from planner.catalog.hardware import GPUS
from planner.catalog.presets import PRESETS

TINY_MODEL = (
    '{"family": "gpt", "name": "tiny-gpt", "num_layers": 4, "hidden_size": 256,'
    ' "num_attention_heads": 4, "vocab_size": 1024}'
)


def _key(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


def _browser(api: Api, headers: dict[str, str]) -> TestClient:
    """A client that holds only the page-session cookie (as a browser after `?key=`)."""
    client = TestClient(api.app, raise_server_exceptions=False)
    r = client.get(f"/plans?key={_key(headers)}", follow_redirects=False)
    assert r.status_code == 303, r.text
    return client


def _csrf(page: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert m is not None
    return m.group(1)


def _form(client: TestClient, **fields: str) -> dict[str, str]:
    base = {
        "csrf": _csrf(client.get("/plans/new").text),
        "model_source": "json",
        "model_json": TINY_MODEL,
        "gpu": "A100-SXM-80GB",
        "num_gpus": "4",
        "gpus_per_node": "4",
        "global_batch_size": "8",
        "seq_length": "256",
        "objective": "time",
        "time_limit_s": "10",
        "top_k": "3",
    }
    return {**base, **fields}


def _errors(page: str) -> dict[str, str]:
    found = re.findall(r'<span class="error" id="error-(\w+)">([^<]*)</span>', page)
    return {name: html.unescape(text) for name, text in found}


def _plan_via_form(client: TestClient) -> str:
    r = client.post("/plans/new", data=_form(client, tags="form"), follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/plans/jobs/"), r.text
    job_url = r.headers["location"]
    deadline = time.monotonic() + 60
    while True:
        r = client.get(job_url, follow_redirects=False)
        if r.status_code == 303:
            return r.headers["location"].removeprefix("/plans/")
        assert r.status_code == 200 and "Searching" in r.text, r.text
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_key_in_the_url_becomes_a_lax_httponly_cookie(api: Api) -> None:
    client = TestClient(api.app)
    r = client.get(f"/plans?key={_key(api.acme)}&tag=x", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/plans?tag=x"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "Path=/" in cookie
    assert "samesite=lax" in cookie.lower() and "secure" not in cookie.lower()  # plain HTTP
    https = TestClient(api.app, base_url="https://testserver")
    r = https.get(f"/plans?key={_key(api.acme)}", follow_redirects=False)
    assert "secure" in r.headers["set-cookie"].lower()


def test_the_start_page_offers_the_form_with_the_catalog(api: Api) -> None:
    assert TestClient(api.app).get("/").status_code == 401  # sign-in page, not a 404
    page = _browser(api, api.acme).get("/").text
    assert 'id="plan-form"' in page
    for name in PRESETS:
        assert f'<option value="{name}"' in page
    for gpu in GPUS:
        assert f">{gpu}</option>" in page


def test_form_plans_through_the_api_and_every_link_answers(api: Api) -> None:
    browser = _browser(api, api.acme)
    plan_id = _plan_via_form(browser)
    page = browser.get(f"/plans/{plan_id}").text
    assert "tiny-gpt on 4 × A100-SXM-80GB" in page and 'id="search-status"' in page
    stored = api.client.get(f"/v1/plans/{plan_id}", headers=api.acme).json()
    assert stored["tags"] == ["form"]  # the API's own plan: the same store, the same tenant
    links = sorted({h.replace("&amp;", "&") for h in re.findall(r'href="(/[^"#]*)"', page)})
    assert any("/launch?" in h for h in links) and f"/v1/plans/{plan_id}" in links
    assert any("/alternatives/" in h for h in links)
    for href in links:
        assert browser.get(href).status_code == 200, href  # the cookie alone, no key in URL
    # the same links without a session, or in another tenant's session
    anon = TestClient(api.app, raise_server_exceptions=False)
    assert anon.get(f"/v1/plans/{plan_id}").status_code == 401
    other = _browser(api, api.globex)
    assert other.get(f"/v1/plans/{plan_id}").status_code == 404
    assert other.get(f"/plans/{plan_id}").status_code == 404


def test_the_cookie_never_authenticates_an_unsafe_api_request(api: Api) -> None:
    browser = _browser(api, api.acme)
    r = browser.post("/v1/plans", json=tiny_request())
    assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"
    assert browser.post("/v1/keys", json={"tenant": "x"}).status_code == 401


def test_the_form_refuses_a_post_without_its_token_or_from_another_origin(api: Api) -> None:
    browser = _browser(api, api.acme)
    r = browser.post("/plans/new", data=_form(browser, csrf="0" * 64), follow_redirects=False)
    assert r.status_code == 403 and "CSRF" in r.text
    r = browser.post(
        "/plans/new",
        data=_form(browser),
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403
    # the token of one session is not another's
    other = _browser(api, api.globex)
    r = other.post("/plans/new", data=_form(browser), follow_redirects=False)
    assert r.status_code == 403


def test_bad_input_comes_back_with_the_error_at_its_field(api: Api) -> None:
    browser = _browser(api, api.acme)
    cases: list[tuple[dict[str, str], str, str]] = [
        ({"num_gpus": "abc"}, "num_gpus", "valid integer"),
        ({"memory_cap_gib": "500"}, "memory_cap_gib", "exceeds the memory of A100-SXM-80GB"),
        ({"num_gpus": "12", "gpus_per_node": "8"}, "num_gpus", "multiple of gpus_per_node=8"),
        ({"model_json": '{"family": "gpt",'}, "model_json", "malformed JSON at line 1 column"),
        ({"model_json": TINY_MODEL.replace("256", "250", 1)}, "model_json", "hidden_size=250"),
        ({"model_source": "preset", "preset": "nope"}, "preset", "unknown preset 'nope'"),
        ({"global_batch_size": "0"}, "global_batch_size", "greater than 0"),
        ({"top_k": "999"}, "top_k", "less than or equal to 50"),
        ({"num_gpus": "100000000"}, "num_gpus", ""),
    ]
    for fields, name, words in cases:
        r = browser.post("/plans/new", data=_form(browser, **fields), follow_redirects=False)
        assert 400 <= r.status_code < 500, (fields, r.status_code)
        errors = _errors(r.text)
        assert name in errors and words in errors[name], (fields, errors)
        for typed in fields.values():  # what was typed is still in the form
            assert typed in html.unescape(r.text), typed


def test_the_progress_page_refreshes_while_running_and_reports_a_failure(api: Api) -> None:
    state = api.app.state.meshplan
    job = claim(state.sessions, tenant="acme", request_hash="j" * 64, single_flight=False)
    assert job is not None
    browser = _browser(api, api.acme)
    r = browser.get(f"/plans/jobs/{job.id}")
    assert r.status_code == 200 and r.headers["retry-after"] == "1"
    assert '<noscript><meta http-equiv="refresh" content="1"></noscript>' in r.text
    assert f'fetch("/v1/jobs/{job.id}"' in r.text  # with JS: polls the API in the session
    assert browser.get(f"/v1/jobs/{job.id}").json()["status"] == "running"
    assert _browser(api, api.globex).get(f"/plans/jobs/{job.id}").status_code == 404
    with session_scope(state.sessions) as session:
        finish(
            session,
            job_id=job.id,
            error={"status": 422, "title": "No feasible plan", "detail": "needs 3 GiB"},
        )
    r = browser.get(f"/plans/jobs/{job.id}")
    assert "No feasible plan" in r.text and "needs 3 GiB" in r.text
    assert "http-equiv" not in r.text


def test_an_infeasible_request_from_the_form_ends_on_its_diagnosis(api: Api) -> None:
    browser = _browser(api, api.acme)
    r = browser.post("/plans/new", data=_form(browser, memory_cap_gib="1.001"))
    deadline = time.monotonic() + 60
    while 'id="job-title">Searching' in r.text and time.monotonic() < deadline:
        time.sleep(0.2)
        r = browser.get(str(r.url))
    assert "The search ended without a plan" in r.text and "No feasible plan" in r.text


def _store(api: Api, request: dict[str, Any], candidate: dict[str, Any], tag: str) -> str:
    with session_scope(api.app.state.meshplan.sessions) as session:
        return insert_plan(
            session,
            tenant="acme",
            request_hash=tag * 64,
            request=request,
            result=evaluated_result(request, candidate),
            tags=[tag],
        ).id


def test_pages_are_gzipped_and_long_stage_tables_folded(api: Api) -> None:
    deep = tiny_request(
        model={**tiny_request()["model"], "num_layers": 22},
        training={"global_batch_size": 16, "seq_length": 256},
    )
    folded = _store(
        api, deep, {"tp": 1, "pp": 4, "dp": 1, "vpp": 5, "schedule": "interleaved-1f1b"}, "f"
    )
    flat = _store(api, tiny_request(), {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"}, "g")
    browser = _browser(api, api.acme)
    r = browser.get(f"/plans/{folded}", headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip"
    assert '<details id="stages-fold"><summary>20 stages' in r.text
    with browser.stream("GET", f"/plans/{folded}", headers={"Accept-Encoding": "gzip"}) as wire:
        sent = b"".join(wire.iter_raw())
    assert len(gzip.decompress(sent)) > 4 * len(sent)  # what crosses the wire is compressed
    assert 'id="stages-fold"' not in browser.get(f"/plans/{flat}").text
    small = browser.get("/v1/health", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in small.headers  # under 1 KB: sent as it is


def test_each_alternative_has_a_page_that_evaluates_it(api: Api) -> None:
    browser = _browser(api, api.acme)
    plan_id = _plan_via_form(browser)
    doc = browser.get(f"/v1/plans/{plan_id}").json()["result"]
    assert doc["alternatives"], doc
    alt = doc["alternatives"][0]
    page = browser.get(f"/plans/{plan_id}/alternatives/0").text
    assert "Alternative #1 of" in page and "Evaluated now with the plan" in page
    assert f"pp {doc['plan']['pp']} → {alt['pp']}" in page or doc["plan"]["pp"] == alt["pp"]
    assert "step time" in page and 'id="compare"' in page
    n = len(doc["alternatives"])
    assert browser.get(f"/plans/{plan_id}/alternatives/{n}").status_code == 404


def test_a_measured_run_shows_beside_its_prediction(api: Api) -> None:
    request = tiny_request()
    plan_id = _store(api, request, {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"}, "r")
    pred = api.client.get(f"/v1/plans/{plan_id}", headers=api.acme).json()["result"]["plan"][
        "prediction"
    ]
    report = {  # measured 1.25 x the predicted step time, 2 GiB peak on a stage
        "device": "cpu",
        "backend": "gloo",
        "world_size": 4,
        "tp": 1,
        "pp": 2,
        "dp": 2,
        "schedule": "1f1b",
        "steps": 2,
        "warmup_steps": 1,
        "step_times_s": [1.25 * pred["step_time_s"]] * 2,
        "step_time_s": 1.25 * pred["step_time_s"],
        "bubble_fraction": 0.3,
        "stages": [
            {"stage": s["stage"], "rank": s["rank"], "busy_s": 0.01, "peak_memory_bytes": 2 * 2**30}
            for s in pred["stages"]
        ],
    }
    r = api.client.post(f"/v1/plans/{plan_id}/runs", json=report, headers=api.acme)
    assert r.status_code == 201, r.text
    page = _browser(api, api.acme).get(f"/plans/{plan_id}").text
    assert "-20.0%" in page  # (predicted - measured) / measured = (1 - 1.25) / 1.25
    assert "class='measured'" in page and "2.00 GiB" in page  # on the trade-off chart


def test_hostile_form_bodies_never_answer_500(api: Api) -> None:
    browser = _browser(api, api.acme)
    token = _csrf(browser.get("/plans/new").text)
    bodies: list[bytes] = [
        b"",
        b"\xff\xfe\x00garbage=%ZZ&&&=",
        f"csrf={token}&model_source=json&model_json=".encode() + b"%5B" * 5000,
        f"csrf={token}&model_source=json&model_json=%7B%22family%22%3A%22gpt%00%22%7D".encode(),
        f"csrf={token}&model_source=json&model_json=%7B%22profile_id%22%3A%22nope%22%7D".encode(),
        f"csrf={token}&model_source=json&model_json=%5B1%5D&num_gpus=1e400".encode(),
        f"csrf={token}&model_source=preset&preset=gpt-3-175b&gpu=H100&num_gpus=8"
        "&global_batch_size=8&seq_length=2048&schedules=nope&objective=money".encode(),
        f"csrf={token}&model_source=banana&num_gpus=-1&seq_length=99999999999".encode(),
    ]
    for body in bodies:
        r = browser.post(
            "/plans/new",
            content=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            follow_redirects=False,
        )
        assert 400 <= r.status_code < 500 and 'id="plan-form"' in r.text, (body[:80], r.text)


def test_a_feasible_search_shows_its_gap_and_bound(api: Api) -> None:
    request = tiny_request()
    result = evaluated_result(request, {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
    result["search"] = {
        **result["search"],
        "status": "FEASIBLE",
        "wall_time_s": 30.2,
        "time_limit_s": 30.0,
        "gap": 0.034,
        "lower_bound_s": 0.0015,
    }
    with session_scope(api.app.state.meshplan.sessions) as session:
        plan_id = insert_plan(
            session, tenant="acme", request_hash="q" * 64, request=request, result=result, tags=[]
        ).id
    page = _browser(api, api.acme).get(f"/plans/{plan_id}").text
    assert re.search(r'id="search-status"[^>]*>FEASIBLE \(gap 3\.4%\)', page), page
    assert re.search(r'id="lower-bound">1\.50 ms<', page)
    assert re.search(r'id="solve-time">30\.200 s', page)
    assert 'id="no-alternatives"' in page  # none stored: said, not an empty table


def test_a_long_timeline_loads_beside_the_page_not_inside_it(api: Api) -> None:
    """GPT-3 175B at vpp=12 on 1,024 GPUs: 18,432 pipeline actions."""
    request = {
        "model": PRESETS["gpt-3-175b"].model_dump(mode="json"),
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 1024},
        "training": {"global_batch_size": 1536, "seq_length": 2048},
    }
    cand = {"tp": 8, "pp": 8, "dp": 16, "vpp": 12, "schedule": "interleaved-1f1b"}
    plan_id = _store(api, request, {**cand, "recompute": "full"}, "t")
    browser = _browser(api, api.acme)
    page = browser.get(f"/plans/{plan_id}")
    src = f"/v1/plans/{plan_id}/timeline.svg"
    assert '<details id="stages-fold"><summary>96 stages' in page.text
    drawing = browser.get(src)
    assert drawing.status_code == 200 and drawing.headers["content-type"] == "image/svg+xml"
    if len(drawing.text) > INLINE_SVG_CHARS:  # the drawing as long as the renderer makes it
        assert f"<img src='{src}'" in page.text and len(page.content) < 200_000
    else:
        assert drawing.text in page.text


def test_many_alternatives_are_folded(api: Api) -> None:
    request = tiny_request()
    chosen = evaluated_result(request, {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
    others = [
        evaluated_result(request, c)["plan"]
        for c in (
            {"tp": 2, "pp": 2, "dp": 1, "schedule": "gpipe"},
            {"tp": 1, "pp": 4, "dp": 1, "schedule": "1f1b"},
            {"tp": 4, "pp": 1, "dp": 1, "schedule": "1f1b"},
        )
    ]
    chosen["alternatives"] = (others * 6)[:17]  # top_k may be up to 50
    with session_scope(api.app.state.meshplan.sessions) as session:
        plan_id = insert_plan(
            session, tenant="acme", request_hash="m" * 64, request=request, result=chosen, tags=[]
        ).id
    page = _browser(api, api.acme).get(f"/plans/{plan_id}").text
    assert '<details id="alternatives-fold"><summary>17 alternatives' in page
    assert page.count("class='alt'") == 17  # all on the chart, folded or not


def test_an_moe_preset_is_offered_and_planned(api: Api) -> None:
    """The MoE presets are listed, and the cost model costs them: the search's answer (a
    plan, or why none fits) is shown instead of a refusal."""
    browser = _browser(api, api.acme)
    assert '<option value="mixtral-8x7b"' in browser.get("/plans/new").text
    fields = {"model_source": "preset", "preset": "mixtral-8x7b", "num_gpus": "8"}
    r = browser.post("/plans/new", data=_form(browser, **fields, gpus_per_node="8"))
    deadline = time.monotonic() + 60
    while 'id="job-title">Searching' in r.text and time.monotonic() < deadline:
        time.sleep(0.2)
        r = browser.get(str(r.url))
    assert r.status_code < 500
    text = html.unescape(r.text)
    assert 'id="job-title">Searching' not in r.text, text[-2000:]
    assert "not yet costed" not in text, text[-2000:]
