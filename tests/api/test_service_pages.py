"""The pages, loaded in headless Chromium (Debian's `chromium`): what a person sees."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from svc_factories import evaluated_result, tiny_request
from svc_harness import ADMIN_KEY, Live, make_settings, serve

from api.app import create_app
from api.store.db import session_scope
from api.store.plans import insert_plan

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
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
