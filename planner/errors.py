"""meshplan's exception tree. Only the API layer maps these to HTTP responses.

MeshplanError
├── SpecError            an invalid value in a spec or request (names the field and value)
├── ScheduleError        a schedule that breaks a dependency or misses an action
│   └── DeadlockError    the simulator could not make progress
├── InfeasibleError      no configuration fits the limits (carries a diagnosis)
├── NotFoundError        a referenced object (profile, plan) does not exist
└── UnsupportedPlanError a framework cannot express a plan (launch configs)
"""

from __future__ import annotations

from typing import Any


class MeshplanError(Exception):
    """Base class of every error meshplan raises on purpose."""


class SpecError(MeshplanError, ValueError):
    """An invalid value: `field` is a dotted path, `value` the offending value."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")


class ScheduleError(MeshplanError):
    """A schedule is invalid; the message embeds the rank x step grid with the failing cell."""


class DeadlockError(ScheduleError):
    """The simulator found no runnable action while actions remain."""


class InfeasibleError(MeshplanError):
    """No configuration satisfies the request; `diagnosis` says which limit binds, by how much."""

    def __init__(self, message: str, diagnosis: dict[str, Any]) -> None:
        self.diagnosis = diagnosis
        super().__init__(message)


class NotFoundError(MeshplanError):
    """A referenced object does not exist."""


class UnsupportedPlanError(MeshplanError):
    """A framework cannot express (part of) a plan; `reasons` lists precisely what."""

    def __init__(self, framework: str, reasons: list[str]) -> None:
        self.framework = framework
        self.reasons = reasons
        super().__init__(f"{framework} cannot express this plan: " + "; ".join(reasons))
