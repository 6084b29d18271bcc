"""Upload a measured ModelProfile to the service: `POST {url}/v1/profiles` (httpx).

The service takes the ModelProfile itself as the body and answers 201 with
`{"id", "created_at", "name", "model_hash", "source", "profile"}` and a `Location` header.
Authentication: `Authorization: Bearer <api key>`. If a service answers 422 to the bare
profile and asks for a `profile` field, the upload is retried once wrapped as
`{"profile": <ModelProfile>}` (tolerance for a service that wraps its bodies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from planner.specs import ModelProfile

__all__ = ["UploadError", "UploadResult", "upload_profile"]


class UploadError(RuntimeError):
    """The service refused the profile or could not be reached; carries status and body."""

    def __init__(self, message: str, *, status_code: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body


@dataclass(frozen=True)
class UploadResult:
    profile_id: str
    location: str | None
    status_code: int
    body: dict[str, Any]


def _asks_for_profile_field(response: httpx.Response) -> bool:
    try:
        doc = response.json()
    except ValueError:
        return False
    text = str(doc)
    return "'profile'" in text and "missing" in text.lower()


def upload_profile(
    profile: ModelProfile,
    *,
    url: str,
    api_key: str,
    client: httpx.Client | None = None,
    timeout_s: float = 30.0,
) -> UploadResult:
    """POST the profile; return the stored id. `client` is the transport seam (tests pass
    the service's TestClient, which is an httpx.Client)."""
    endpoint = url.rstrip("/") + "/v1/profiles"
    headers = {"Authorization": f"Bearer {api_key}"}
    doc = profile.model_dump(mode="json")
    own = client is None
    http = client or httpx.Client(timeout=timeout_s)
    try:
        try:
            response = http.post(endpoint, json=doc, headers=headers)
            if response.status_code == 422 and _asks_for_profile_field(response):
                response = http.post(endpoint, json={"profile": doc}, headers=headers)
        except httpx.HTTPError as exc:
            raise UploadError(f"POST {endpoint} failed: {exc}") from exc
    finally:
        if own:
            http.close()
    try:
        body = response.json()
    except ValueError:
        body = {"text": response.text}
    if response.status_code not in (200, 201):
        detail = body.get("detail") if isinstance(body, dict) else None
        raise UploadError(
            f"POST {endpoint} answered {response.status_code}: {detail or response.text[:300]}",
            status_code=response.status_code,
            body=body,
        )
    profile_id = str(body.get("id") or body.get("profile_id") or "")
    if not profile_id:
        raise UploadError(
            f"POST {endpoint} answered {response.status_code} without an id",
            status_code=response.status_code,
            body=body,
        )
    return UploadResult(
        profile_id=profile_id,
        location=response.headers.get("Location"),
        status_code=response.status_code,
        body=body,
    )
