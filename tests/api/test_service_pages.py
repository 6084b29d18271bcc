"""The pages, loaded in headless Chromium (Debian's `chromium`): what a person sees and does.

The form tests drive chromium over the DevTools protocol (tests/api/pages_browser.py): plan
with the form (with and without JavaScript), open the plan, follow every link in the page
session, compare alternatives. Screenshots go to $MESHPLAN_ARTIFACTS/pages, by default
tests/artifacts/pages (gitignored)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from pages_browser import Browser
from svc_factories import evaluated_result, tiny_request
from svc_harness import ADMIN_KEY, Live, make_settings, serve

from api.app import create_app
from api.store.db import session_scope
from api.store.plans import insert_plan

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("MESHPLAN_ARTIFACTS") or Path(__file__).parents[1] / "artifacts")
SHOTS = ARTIFACTS / "pages"
TINY_MODEL = {
    "family": "gpt",
    "name": "tiny-gpt",
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "vocab_size": 1024,
}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--hide-scrollbars",
]


class _Text(HTMLParser):
    """Visible text of a DOM dump (script/style dropped), plus the tags seen."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.tags: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._skip += tag in ("script", "style", "title")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style", "title")

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def dump(url: str, profile_dir: Path) -> _Text:
    out = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    ).stdout
    parser = _Text()
    parser.feed(out)
    return parser


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Live, str, str]]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed (make system-deps installs Debian's chromium)")
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'pages.db'}"))
    with serve(app) as live:
        import httpx

        key = httpx.post(
            f"{live.url}/v1/keys",
            json={"tenant": "acme"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ).json()["key"]
        req = tiny_request()
        result = evaluated_result(req, {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
        with session_scope(app.state.meshplan.sessions) as session:
            pid = insert_plan(
                session,
                tenant="acme",
                request_hash="p" * 64,
                request=req,
                result=result,
                tags=["browser"],
            ).id
        pred = result["plan"]["prediction"]
        report = {  # a measured run twice as slow as predicted
            "device": "cpu",
            "backend": "gloo",
            "world_size": 4,
            "tp": 1,
            "pp": 2,
            "dp": 2,
            "schedule": "1f1b",
            "steps": 2,
            "warmup_steps": 1,
            "step_times_s": [2 * pred["step_time_s"]] * 2,
            "step_time_s": 2 * pred["step_time_s"],
            "bubble_fraction": 0.25,
            "stages": [
                {"stage": s["stage"], "rank": s["rank"], "busy_s": 0.01, "peak_memory_bytes": 1e9}
                for s in pred["stages"]
            ],
        }
        r = httpx.post(
            f"{live.url}/v1/plans/{pid}/runs",
            json=report,
            headers={"Authorization": f"Bearer {key}"},
        )
        assert r.status_code == 201, r.text
        yield live, key, pid


def test_plan_page_shows_the_plan(site: tuple[Live, str, str], tmp_path: Path) -> None:
    live, key, pid = site
    page = dump(f"{live.url}/plans/{pid}?key={key}", tmp_path / "profile")
    text = " ".join(page.parts)
    assert "tiny-gpt on 4 × A100-SXM-80GB" in text
    for heading in (
        "Degrees",
        "Prediction",
        "Why this plan",
        "Pipeline timeline",
        "Memory per GPU",
        "Stages",
        "Alternatives",
        "Measured runs",
    ):
        assert heading in text
    assert "rank 0" in text and "rank 1" in text and "cap 80.0 GiB" in text
    assert page.tags.count("svg") >= 2  # timeline and memory chart, inline
    assert "1f1b" in text
    assert "-50.0%" in text  # the measured run: predicted step time half the measured one
    assert "cpu (gloo)" in text
    assert "catalog defaults (no calibration)" in text  # the cost model the plan was made with
    shot = tmp_path / "plan.png"
    subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,2200",
            f"--screenshot={shot}",
            f"{live.url}/plans/{pid}?key={key}",
        ],
        capture_output=True,
        timeout=90,
        check=True,
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_history_page_lists_and_filters(site: tuple[Live, str, str], tmp_path: Path) -> None:
    live, key, _pid = site
    page = dump(f"{live.url}/plans?key={key}&tag=browser", tmp_path / "p1")
    text = " ".join(page.parts)
    assert "Plan history" in text and "tiny-gpt" in text and "4 × A100-SXM-80GB" in text
    page = dump(f"{live.url}/plans?key={key}&model_name=other", tmp_path / "p2")
    assert "No plans match" in " ".join(page.parts)


def test_pages_need_a_key(site: tuple[Live, str, str], tmp_path: Path) -> None:
    live, _key, pid = site
    text = " ".join(dump(f"{live.url}/plans/{pid}", tmp_path / "p3").parts)
    assert "An API key is required" in text and "tiny-gpt" not in text
    text = " ".join(dump(f"{live.url}/plans?key=wrong", tmp_path / "p4").parts)
    assert "Unknown API key" in text


def _fill(browser: Browser, **fields: str) -> None:
    """Type into the form as a person would (radio, select, text), then press Plan."""
    browser.js(
        "(() => { const f = document.querySelector('#plan-form');"
        f" const v = {json.dumps(fields)};"
        " for (const [k, x] of Object.entries(v)) {"
        "  if (k === 'model_source') f.querySelector(`[name=model_source][value=${x}]`).click();"
        "  else if (k === 'schedules') f.querySelectorAll('[name=schedules]').forEach("
        "   c => { c.checked = x.split(',').includes(c.value); });"
        "  else f.elements[k].value = x; }"
        " f.querySelector('#submit').click(); return true; })()"
    )


TINY_FORM = {
    "model_source": "json",
    "model_json": json.dumps(TINY_MODEL),
    "gpu": "A100-SXM-80GB",
    "num_gpus": "4",
    "gpus_per_node": "4",
    "global_batch_size": "8",
    "seq_length": "256",
    "time_limit_s": "10",
    "top_k": "3",
}
PRESET_FORM = {  # a catalog preset, as the form offers it
    "model_source": "preset",
    "preset": "llama-3-8b",
    "gpu": "H100-SXM-80GB",
    "num_gpus": "64",
    "gpus_per_node": "8",
    "global_batch_size": "512",
    "seq_length": "4096",
    "time_limit_s": "10",
    "top_k": "5",
}
ON_PLAN = (
    "/^\\/plans\\/[0-9a-f]{32}$/.test(location.pathname) && !!document.querySelector('#plan-title')"
)


def _links_answer(browser: Browser) -> dict[str, int]:
    """Every same-origin link on the page (HTML and SVG anchors), fetched by the browser in
    its page session: {href: status}."""
    out = browser.call(
        "Runtime.evaluate",
        expression=(
            "Promise.all([...new Set([...document.querySelectorAll('a')]"
            ".map(a => a.getAttribute('href')).filter(h => h && h.startsWith('/')))]"
            ".map(h => fetch(h, {credentials: 'same-origin', redirect: 'manual'})"
            ".then(r => [h, r.status])))"
        ),
        awaitPromise=True,
        returnByValue=True,
    )
    return dict(out["result"]["value"])


def test_plan_with_the_form_without_javascript(site: tuple[Live, str, str], tmp_path: Path) -> None:
    live, key, _pid = site
    with Browser(tmp_path / "nojs", javascript=False) as b:
        b.go(f"{live.url}/?key={key}")
        assert b.js("location.search") == ""  # the key moved into the cookie
        assert b.js("document.cookie") == ""  # HttpOnly: not readable by scripts
        assert "Plan a training run" in b.text()
        b.screenshot(SHOTS / "form.png")
        _fill(b, **{**TINY_FORM, "num_gpus": "abc"})
        b.wait_for("!!document.querySelector('#error-num_gpus')")
        # the error sits in the field's own label, next to what was typed
        assert b.js("document.querySelector('#num_gpus').value") == "abc"
        beside = b.js("document.querySelector('#num_gpus').parentElement.textContent")
        assert "valid integer" in beside
        b.screenshot(SHOTS / "form-error.png")
        _fill(b, **PRESET_FORM, tags="nojs")
        where = b.wait_for(f"location.pathname.startsWith('/plans/jobs/') ? 'job' : ({ON_PLAN})")
        if where == "job":  # the search outlasted the POST: the page follows it by itself
            assert "Searching" in b.text()
            assert b.js("!!document.querySelector('noscript meta[http-equiv=refresh]')")
            b.screenshot(SHOTS / "progress.png")
        b.wait_for(ON_PLAN)  # meta refresh -> plan page, no script ran
        text = b.text()
        assert "llama-3-8b on 64 × H100-SXM-80GB" in text and "OPTIMAL" in text
        assert "differs from the chosen plan" in text and "Trade-off" in text
        b.screenshot(SHOTS / "plan-from-form.png")


def test_plan_page_links_and_alternatives(site: tuple[Live, str, str], tmp_path: Path) -> None:
    live, key, _pid = site
    with Browser(tmp_path / "js") as b:
        b.go(f"{live.url}/plans/new?key={key}")
        _fill(b, **TINY_FORM, schedules="1f1b,gpipe,zb-h1", tags="js")
        b.wait_for(ON_PLAN)
        plan_url = b.url()
        plan_id = plan_url.rsplit("/", 1)[1]
        answers = _links_answer(b)
        assert f"/v1/plans/{plan_id}" in answers and f"/v1/plans/{plan_id}/timeline.svg" in answers
        assert sum("/launch?" in h for h in answers) >= 3
        assert sum("/alternatives/" in h for h in answers) >= 2  # table rows and chart dots
        assert {h: s for h, s in answers.items() if s != 200} == {}
        # the alternatives as a person compares them: the table, then one alternative's page
        rows = b.js("document.querySelectorAll('#alternatives tr[id^=alt-]').length")
        assert rows >= 2
        schedules = b.js(
            "[...document.querySelectorAll('#alternatives tr[id^=alt-] td:nth-child(6)')]"
            ".map(td => td.textContent)"
        )
        assert set(schedules) <= {"1f1b", "gpipe", "zb-h1"}
        b.screenshot(SHOTS / "plan.png")
        b.js("document.querySelector('#alt-0 a.alt-link').click()")
        b.wait_for("!!document.querySelector('#alt-title')")
        text = b.text()
        assert "Alternative #1 of" in text and "Differs from the chosen plan" in text
        assert "Evaluated now with the plan's stored request" in text
        b.screenshot(SHOTS / "alternative.png")
        # the JSON and the timeline open in the browser as they are linked
        b.go(f"{live.url}/v1/plans/{plan_id}")
        assert json.loads(b.text())["id"] == plan_id
        b.screenshot(SHOTS / "plan-json.png")
        b.go(f"{live.url}/v1/plans/{plan_id}/timeline.svg")
        assert b.js("document.documentElement.tagName.toLowerCase()") == "svg"
        b.go(f"{live.url}/plans?tag=js")
        assert "tiny-gpt" in b.text()
        b.screenshot(SHOTS / "history.png")
