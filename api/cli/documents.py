"""Which of meshplan's JSON documents a file holds, so that a wrong file gets a useful answer.

The commands read three kinds: a plan request (`meshplan plan --request`, `evaluate
--request`), a plan (`launch --plan-file`: what `meshplan plan --json` prints, the service's
plan document, or a bare Plan) and a candidate (`evaluate --candidate`). Given one where another
is expected, pydantic would list every missing field; `expect(...)` says instead what the file
is and what to run.
"""

from __future__ import annotations

from typing import Any, Literal

from api.cli.output import fail

Kind = Literal["request", "plan", "candidate", "unknown"]

REQUEST_KEYS = frozenset({"model", "cluster", "training"})
PLAN_KEYS = frozenset({"model_hash", "prediction", "stages"})
CANDIDATE_KEYS = frozenset({"tp", "pp", "dp", "vpp", "schedule", "micro_batch_size"})


def kind_of(doc: Any) -> Kind:
    """The kind of `doc`, judged by the keys each kind must (or typically does) carry."""
    if not isinstance(doc, dict):
        return "unknown"
    result = doc.get("result")
    if isinstance(doc.get("plan"), dict) or (
        isinstance(result, dict) and isinstance(result.get("plan"), dict)
    ):
        return "plan"
    keys = doc.keys()
    if keys >= PLAN_KEYS:
        return "plan"
    if len(REQUEST_KEYS & keys) >= 2:
        return "request"
    if keys and keys <= CANDIDATE_KEYS | {"zero_stage", "sequence_parallel", "recompute"}:
        return "candidate"
    return "unknown"


def _advice(found: Kind, expected: Kind, path: str) -> str:
    if found == "request" and expected == "plan":
        return (
            f"{path} is a plan request, not a plan; run `meshplan plan --request {path} --json "
            "> plan.json` first and give plan.json"
        )
    if found == "plan" and expected == "request":
        return (
            f"{path} is a plan (what `meshplan plan --json` prints), not a plan request; "
            "give the request it was planned from"
        )
    if found == "plan" and expected == "candidate":
        return (
            f"{path} is a plan, whose prediction is already in it; a candidate is a fixed "
            'configuration such as {"tp": 2, "pp": 4, "dp": 8, "micro_batch_size": 1}'
        )
    if found == "request" and expected == "candidate":
        return (
            f"{path} is a plan request, not a candidate; give it as --request and a fixed "
            'configuration such as {"tp": 2, "pp": 4, "dp": 8} as --candidate'
        )
    if found == "candidate" and expected == "request":
        return (
            f"{path} is a candidate, not a plan request; give it as --candidate and the request "
            "(model, cluster, training) as --request"
        )
    article = "an" if found[0] in "aeiou" else "a"
    return f"{path} is {article} {found}, not a {expected}; check which file goes where"


def expect(doc: Any, expected: Kind, path: str) -> Any:
    """`doc` unchanged when it may be of the `expected` kind; otherwise a user error naming
    what it is and what to do."""
    found = kind_of(doc)
    if found not in ("unknown", expected):
        fail(_advice(found, expected, path), doc={"error": f"not a {expected}", "found": found})
    return doc
