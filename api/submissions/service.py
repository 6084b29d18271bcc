"""Create and cancel submissions (the routes' work, run in a worker thread).

Creating one: check the tenant's allowance (403), render the job (422), submit it, and only
then record it — the row, its token hash and (with an Idempotency-Key) the stored response in
one transaction. A scheduler that is down (503) or refuses the job (422) leaves no row. If the
record cannot be written after the scheduler took the job, the job is cancelled again. The one
window left is a crash of this process between the scheduler's answer and the commit: the job
then runs unrecorded, under the name `<job_name>-<8 hex of the submission id>`, and cannot
report (its token was never stored).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from api.problems import ProblemError
from api.settings import Settings
from api.state import AppState
from api.store import plans as plan_store
from api.store import submissions as submission_store
from api.store.ids import new_id
from api.store.keys import Principal
from api.store.tables import SubmissionRow, utcnow
from api.submissions.jobscript import ReportTarget, SubmissionDeployment, build_job
from api.submissions.states import status_values, store_status
from api.submissions.tokens import new_token, token_hash
from api.submit import SubmissionRejected, SubmitterUnavailable
from planner.errors import SpecError, UnsupportedPlanError
from planner.plan import PlanResult

log = logging.getLogger("meshplan.api.submissions")

Backend = Literal["slurm", "kubernetes"]
Framework = Literal["meshplan", "megatron", "torchtitan", "deepspeed"]


class SubmissionCreate(BaseModel):
    """`POST /v1/plans/{id}/submissions`: where and how to run the plan."""

    model_config = {"extra": "forbid"}

    backend: Backend
    framework: Framework = "meshplan"
    deployment: SubmissionDeployment = Field(default_factory=SubmissionDeployment)
    report: bool = Field(
        default=False, description="the job posts its RunReport back (framework meshplan)"
    )


def check_allowed(settings: Settings, tenant: str, body: SubmissionCreate) -> None:
    """403 unless the settings let `tenant` use this backend and partition."""
    allowance = settings.submission_tenants.get(tenant) or settings.submission_tenants.get("*")
    backends = allowance.backends if allowance is not None else []
    if body.backend not in backends:
        raise ProblemError(
            403,
            "Backend not allowed",
            f"tenant {tenant!r} may not submit to backend {body.backend!r}; allowed: {backends}",
            kind="submission-forbidden",
            field="backend",
        )
    partitions = allowance.partitions if allowance is not None else None
    partition = body.deployment.partition
    if partitions is not None and partition not in partitions:
        raise ProblemError(
            403,
            "Partition not allowed",
            f"tenant {tenant!r} may not submit to partition {partition!r} on {body.backend}; "
            f"allowed: {partitions}",
            kind="submission-forbidden",
            field="deployment.partition",
        )


# sbatch options the service sets or the allow-list governs; sbatch (getopt_long) also takes
# any unambiguous prefix of a long option, so a prefix of one of these is refused too.
RESERVED_SLURM_OPTIONS = (
    "partition",
    "account",
    "chdir",
    "job-name",
    "nodes",
    "time",
    "export",
    "uid",
    "gid",
    "wrap",
    "parsable",
)
_OPTION = re.compile(r"^[a-z][a-z0-9-]*$")


def check_options(body: SubmissionCreate) -> None:
    """422 for a backend option that is no option name, or (Slurm) one the service sets itself
    or the tenant's allowance governs (`partition` belongs in `deployment.partition`)."""
    for key in body.deployment.options:
        field = f"body.deployment.options.{key}"
        if not _OPTION.match(key):
            why = "an option name is lower-case letters, digits and '-', without the dashes"
        elif body.backend == "slurm" and any(r.startswith(key) for r in RESERVED_SLURM_OPTIONS):
            why = (
                f"the service sets --{key} (or it abbreviates one it sets: "
                f"{[r for r in RESERVED_SLURM_OPTIONS if r.startswith(key)]}); use the "
                f"deployment's own fields"
            )
        else:
            continue
        raise ProblemError(
            422,
            "Invalid backend option",
            f"{field}: {why}",
            kind="validation",
            errors=[{"field": field, "message": why, "value": key}],
        )


def _check_report(body: SubmissionCreate) -> None:
    if body.report and body.framework != "meshplan":
        raise ProblemError(
            422,
            "Cannot report",
            f"report: true needs framework 'meshplan' (profiler.run_plan posts the RunReport); "
            f"framework {body.framework!r} does not",
            kind="validation",
            errors=[{"field": "body.report", "message": "needs framework 'meshplan'"}],
        )


def unavailable(exc: SubmitterUnavailable) -> ProblemError:
    return ProblemError(
        503,
        "Scheduler unavailable",
        str(exc)[:2000],
        kind="scheduler-unavailable",
        headers={"Retry-After": str(exc.retry_after_s)},
    )


def rejected(exc: SubmissionRejected) -> ProblemError:
    return ProblemError(422, "Submission rejected", str(exc)[:2000], kind="submission-rejected")


def create_submission(
    state: AppState,
    principal: Principal,
    plan_id: str,
    body: SubmissionCreate,
    *,
    report_url: str,
    record: Callable[[Session, SubmissionRow], None] | None = None,
) -> SubmissionRow:
    """Submit the plan and record the submission. `record(session, row)` runs inside the
    recording transaction (the route stores its idempotent response there)."""
    tenant = principal.tenant
    check_allowed(state.settings, tenant, body)
    check_options(body)
    _check_report(body)
    with state.sessions() as session:
        plan_row = plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)
    if plan_row is None:
        raise ProblemError(404, "Not found", f"no plan {plan_id!r}")
    plan = PlanResult.model_validate(plan_row.result).plan
    submission_id = new_id()
    token = new_token() if body.report else None
    target = ReportTarget(url=report_url, token=token, plan_id=plan_id) if token else None
    try:
        spec = build_job(
            plan,
            body.deployment,
            backend=body.backend,
            framework=body.framework,
            submission_id=submission_id,
            report=target,
        )
    except (SpecError, UnsupportedPlanError):
        raise  # 422 problems naming the field / every reason
    except ValueError as exc:
        raise ProblemError(
            422, "Cannot render the job", str(exc)[:2000], kind="validation"
        ) from exc
    try:
        submitter = state.submitters.get(body.backend)
        job_id = submitter.submit(spec)
    except SubmitterUnavailable as exc:
        raise unavailable(exc) from exc
    except SubmissionRejected as exc:
        raise rejected(exc) from exc
    now = utcnow()
    row = SubmissionRow(
        id=submission_id,
        tenant=tenant,
        plan_id=plan_id,
        backend=body.backend,
        framework=body.framework,
        partition=body.deployment.partition,
        state="PENDING",
        scheduler_job_id=job_id,
        created_at=now,
        submitted_at=now,
        log_tail="",
        report=body.report,
        report_token_hash=token_hash(token) if token else None,
        run_ids=[],
        deployment=body.deployment.model_dump(mode="json"),
    )
    try:
        with state.sessions() as session:
            session.add(row)
            session.flush()
            if record is not None:
                record(session, row)
            session.commit()
    except BaseException:
        log.error("recording submission %s failed; cancelling job %s", submission_id, job_id)
        try:
            submitter.cancel(job_id)
        except Exception:
            log.exception("cancelling unrecorded job %s failed", job_id)
        raise
    return row


def cancel_submission(state: AppState, principal: Principal, submission_id: str) -> SubmissionRow:
    """Ask the scheduler to cancel, then store what it says right after (the poller follows
    the job to its final state). A finished submission is answered as it is."""
    with state.sessions() as session:
        row = submission_store.get_submission(
            session, tenant=principal.tenant, submission_id=submission_id
        )
        if row is None:
            raise ProblemError(404, "Not found", f"no submission {submission_id!r}")
        if row.state not in submission_store.OPEN_STATES or row.scheduler_job_id is None:
            return row
        job_id = row.scheduler_job_id
        try:
            submitter = state.submitters.get(row.backend)
            submitter.cancel(job_id)
        except SubmitterUnavailable as exc:
            raise unavailable(exc) from exc
        row.cancel_requested_at = utcnow()
        session.commit()
        try:
            status = submitter.status([job_id])[job_id]
            tail = submitter.log_tail(job_id, state.settings.submission_log_lines)
        except Exception:  # the poller will learn it; the cancel itself went through
            log.warning("status after cancelling %s failed", job_id, exc_info=True)
            return row
        values = status_values(
            row,
            status,
            log_tail=tail,
            now=utcnow(),
            token_grace_s=state.settings.submission_token_grace_s,
        )
        store_status(session, row.id, values)
        session.commit()
        session.refresh(row)
        return row
