"""`meshplan submissions list|show|cancel`: the service's submissions (docs/submissions.md),
and the small HTTP client `meshplan submit` shares."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import typer

from api.cli.output import emit_json, fail

UrlOpt = Annotated[str, typer.Option("--url", envvar="MESHPLAN_URL", help="service URL")]
KeyOpt = Annotated[
    str | None, typer.Option("--api-key", envvar="MESHPLAN_API_KEY", help="service API key")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
DEFAULT_URL = "http://127.0.0.1:8000"
FINAL = ("COMPLETED", "FAILED", "CANCELLED")


@dataclass(frozen=True)
class Service:
    """The meshplan service at `url`; every failure ends the command with one line."""

    url: str
    api_key: str | None
    as_json: bool
    timeout_s: float = 60.0

    def call(
        self,
        method: str,
        path: str,
        *,
        ok: tuple[int, ...] = (200,),
        retries: int = 0,
        **kw: Any,
    ) -> httpx.Response:
        """`retries` more attempts after a lost connection (only for idempotent requests)."""
        headers = {**kw.pop("headers", {})}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        for attempt in range(retries + 1):
            try:
                r = httpx.request(
                    method,
                    f"{self.url.rstrip('/')}{path}",
                    headers=headers,
                    timeout=self.timeout_s,
                    **kw,
                )
                break
            except httpx.HTTPError as exc:
                if attempt == retries:
                    fail(f"cannot reach {self.url}: {exc}", code=1, as_json=self.as_json)
                time.sleep(1.0)
        if r.status_code not in ok:
            self._problem(method, path, r)
        return r

    def _problem(self, method: str, path: str, r: httpx.Response) -> None:
        try:
            doc = r.json()
        except ValueError:
            doc = {"detail": r.text[:500]}
        detail = doc.get("detail") or doc.get("title") or r.text[:500]
        retry = r.headers.get("retry-after")
        hint = f" (retry after {retry} s)" if retry else ""
        fail(
            f"{method} {path} answered {r.status_code}: {detail}{hint}",
            code=2 if r.status_code < 500 else 1,
            as_json=self.as_json,
            doc={"error": doc.get("title", "request failed"), "status": r.status_code, **doc},
        )


def describe(doc: dict[str, Any]) -> str:
    """One line for a submission: id, state, job, exit code, reason."""
    parts = [
        doc["id"],
        doc["state"],
        f"{doc['backend']} job {doc.get('scheduler_job_id') or '-'}",
        f"plan {doc['plan_id']}",
    ]
    if doc.get("exit_code") is not None:
        parts.append(f"exit {doc['exit_code']}")
    if doc.get("reason"):
        parts.append(f"({doc['reason']})")
    if doc.get("run_ids"):
        parts.append(f"runs {','.join(doc['run_ids'])}")
    return "  ".join(parts)


def print_submission(doc: dict[str, Any]) -> None:
    typer.echo(describe(doc))
    for name in ("submitted_at", "started_at", "finished_at"):
        if doc.get(name):
            typer.echo(f"  {name:<13}{doc[name]}")
    if doc.get("log_tail"):
        typer.echo("  log tail:")
        for line in doc["log_tail"].splitlines():
            typer.echo(f"    {line}")


def list_cmd(
    plan_id: Annotated[str | None, typer.Option("--plan-id", help="only this plan's")] = None,
    state: Annotated[str | None, typer.Option("--state", help="PENDING, RUNNING, ...")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="slurm | kubernetes")] = None,
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=200)] = 50,
    page_token: Annotated[str | None, typer.Option("--page-token")] = None,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List submissions, newest first (one page; --page-token for the next)."""
    params = {
        k: v
        for k, v in {
            "plan_id": plan_id,
            "state": state,
            "backend": backend,
            "page_size": page_size,
            "page_token": page_token,
        }.items()
        if v is not None
    }
    body = Service(url, api_key, as_json).call("GET", "/v1/submissions", params=params).json()
    if as_json:
        emit_json(body)
        return
    for doc in body["data"]:
        typer.echo(describe(doc))
    if not body["data"]:
        typer.echo("no submissions")
    if body.get("next_page_token"):
        typer.echo(f"more: --page-token {body['next_page_token']}")


def show_cmd(
    submission_id: Annotated[str, typer.Argument(help="submission id")],
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One submission: state, times, exit code, reason, log tail."""
    doc = Service(url, api_key, as_json).call("GET", f"/v1/submissions/{submission_id}").json()
    emit_json(doc) if as_json else print_submission(doc)


def cancel_cmd(
    submission_id: Annotated[str, typer.Argument(help="submission id")],
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a submission (scancel / delete the Kubernetes job)."""
    doc = Service(url, api_key, as_json).call("DELETE", f"/v1/submissions/{submission_id}").json()
    emit_json(doc) if as_json else print_submission(doc)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Submissions of plans to cluster schedulers.", no_args_is_help=True)
    group.command("list")(list_cmd)
    group.command("show")(show_cmd)
    group.command("cancel")(cancel_cmd)
    app.add_typer(group, name="submissions")
