"""Plan resource schemas: the stored plan, its history summary, a list page, a search job."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.problem import Problem
from api.schemas.submissions import SubmissionPublic
from api.store.plans import SortKey
from planner.plan import PlanResult
from planner.specs import PlanRequest, ScheduleName
from planner.specs.limits import TEXT

# The fields of a POST /v1/plans body that only the service has.
SERVICE_FIELDS = frozenset({"tags", "force"})


class PlanCreate(PlanRequest):
    """POST /v1/plans: a plan request (the core's `PlanRequest`, the JSON `meshplan plan`
    reads) and the fields only the service has: the plan's tags and `force`."""

    tags: tuple[Annotated[str, Field(min_length=1, max_length=TEXT.tag_chars)], ...] = Field(
        default=(), max_length=TEXT.tags, description="labels for the plan history"
    )
    force: bool = Field(default=False, description="re-plan even if a plan is cached")

    def core(self) -> PlanRequest:
        """The request without the service's fields (its values are validated already)."""
        return PlanRequest.model_construct(
            **{name: getattr(self, name) for name in PlanRequest.model_fields}
        )


def core_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored plan's request document (which carries its tags) as the core's JSON."""
    return {k: v for k, v in doc.items() if k not in SERVICE_FIELDS}


class PlanLinks(BaseModel):
    self: str
    timeline_svg: str
    launch: str
    runs: str
    page: str


class PlanPublic(BaseModel):
    """A stored plan: the normalised request and the search result."""

    id: str
    created_at: datetime
    cache_hit: bool = Field(description="true when answered from a stored plan (no new search)")
    tags: list[str]
    request: dict[str, Any] = Field(description="the normalised plan request")
    result: PlanResult
    links: PlanLinks
    cost_model_version: str = Field(
        description="planner.cost.version.COST_MODEL_VERSION the plan was made with; "
        "'unknown' for plans stored before plans recorded it"
    )
    calibration_id: str | None = Field(
        description="the calibration the plan was made with (null: the catalog defaults, or "
        "unknown when cost_model_version is)"
    )
    submissions: list[SubmissionPublic] | None = Field(
        default=None, description="the plan's submissions, newest first (GET of one plan)"
    )


class PlanSummary(BaseModel):
    id: str
    created_at: datetime
    model_name: str
    model_hash: str
    gpu: str
    num_gpus: int
    schedule: str
    tp: int
    pp: int
    dp: int
    vpp: int
    micro_batch_size: int
    step_time_s: float
    tokens_per_s: float
    bubble_fraction: float
    peak_memory_bytes: float
    tags: list[str]
    cost_model_version: str = Field(
        description="planner.cost.version.COST_MODEL_VERSION the plan was made with; "
        "'unknown' for plans stored before plans recorded it"
    )
    calibration_id: str | None = Field(
        description="the calibration the plan was made with (null: the catalog defaults, or "
        "unknown when cost_model_version is)"
    )


class PlanListPublic(BaseModel):
    data: list[PlanSummary]
    next_page_token: str | None = Field(description="pass as page_token for the next page")


class SearchProgressPublic(BaseModel):
    """A running search's latest progress report (planner.search.SearchProgress)."""

    settled: int | None = Field(default=None, description="configurations decided so far")
    total: int | None = Field(default=None, description="configurations to decide")
    incumbent_s: float | None = Field(default=None, description="best step time found, s")
    lower_bound_s: float | None = Field(default=None, description="proven lower bound, s")
    gap: float | None = Field(default=None, description="(incumbent - bound) / incumbent")
    elapsed_s: float | None = Field(default=None, description="search time so far, s")


class JobPublic(BaseModel):
    """A search started with `Prefer: respond-async`; poll until `status` is not running."""

    id: str
    status: Literal["running", "succeeded", "failed"]
    progress: float = Field(ge=0, le=1, description="fraction of configurations searched")
    progress_detail: SearchProgressPublic | None = Field(
        default=None, description="the search's latest progress report, once it sent one"
    )
    created_at: datetime
    finished_at: datetime | None = None
    plan_id: str | None = None
    plan_url: str | None = None
    error: Problem | None = None


class PlanQuery(BaseModel):
    """GET /v1/plans' query parameters (api.query.read_query)."""

    model_config = ConfigDict(frozen=True)

    model_name: str | None = None
    model_hash: str | None = None
    gpu: str | None = None
    min_gpus: int | None = Field(default=None, ge=1, le=10**9)
    max_gpus: int | None = Field(default=None, ge=1, le=10**9)
    schedule: ScheduleName | None = None
    tp: int | None = Field(default=None, ge=1, le=10**9)
    pp: int | None = Field(default=None, ge=1, le=10**9)
    dp: int | None = Field(default=None, ge=1, le=10**9)
    created_after: datetime | None = None
    created_before: datetime | None = None
    tag: str | None = None
    cost_model_version: str | None = Field(default=None, max_length=32)
    calibration_id: str | None = Field(default=None, max_length=64)
    sort: SortKey = "-created_at"
    page_size: int = Field(default=50, ge=1, le=200)
    page_token: str | None = Field(default=None, max_length=1000)
