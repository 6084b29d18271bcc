"""A tiny HTTP server that answers the few Kubernetes API requests the submitter makes, the way the
API server does (paths, JSON bodies, Status objects on errors, labelSelector filtering), so the
official `kubernetes` client runs unchanged against it. No Kubernetes cluster runs on these
machines; the tests play the training-operator by editing `jobs` and `pods`."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

JOBS = re.compile(r"/apis/kubeflow\.org/v1/namespaces/([^/]+)/pytorchjobs(?:/([^/]+))?")
CONFIGMAPS = re.compile(r"/api/v1/namespaces/([^/]+)/configmaps(?:/([^/]+))?")
PODS = re.compile(r"/api/v1/namespaces/([^/]+)/pods")
LOG = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log")


@dataclass
class ApiState:
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    configmaps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    fail_with: int | None = None  # answer every request with this status (e.g. 503)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _matches(obj: dict[str, Any], selector: str | None) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


def make_handler(state: ApiState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            with state.lock:
                state.requests.append((method, url.path))
                if state.fail_with is not None:
                    down = _status(state.fail_with, "ServiceUnavailable", "the server is down")
                    return self._send(state.fail_with, down)
                code, answer = self._answer(method, url.path, query, body)
            self._send(
                code, answer, "text/plain" if isinstance(answer, str) else "application/json"
            )

        def _answer(
            self, method: str, path: str, query: dict[str, str], body: Any
        ) -> tuple[int, Any]:
            selector = query.get("labelSelector")
            if m := LOG.fullmatch(path):
                text = state.logs.get((m[1], m[2]))
                if text is None:
                    return 404, _status(404, "NotFound", f'pods "{m[2]}" not found')
                n = int(query.get("tailLines", "0") or 0)
                return 200, "".join(text.splitlines(keepends=True)[-n:] if n else text)
            if m := PODS.fullmatch(path):
                items = [
                    p for (ns, _), p in state.pods.items() if ns == m[1] and _matches(p, selector)
                ]
                return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
            for pattern, store, kind in ((JOBS, state.jobs, "PyTorchJob"),
                                         (CONFIGMAPS, state.configmaps, "ConfigMap")):  # fmt: skip
                if m := pattern.fullmatch(path):
                    return self._collection(method, store, kind, m[1], m[2], selector, body)
            return 404, _status(404, "NotFound", f"no route {path}")

        def _collection(
            self,
            method: str,
            store: dict[tuple[str, str], dict[str, Any]],
            kind: str,
            ns: str,
            name: str | None,
            selector: str | None,
            body: Any,
        ) -> tuple[int, Any]:
            if method == "POST":
                key = (ns, body["metadata"]["name"])
                if key in store:
                    return 409, _status(409, "AlreadyExists", f'{kind} "{key[1]}" already exists')
                body["metadata"].setdefault("uid", f"uid-{len(store)}")
                store[key] = body
                return 201, body
            if method == "GET" and name is None:
                items = [o for (n, _), o in store.items() if n == ns and _matches(o, selector)]
                return 200, {"kind": f"{kind}List", "metadata": {}, "items": items}
            if method == "DELETE" and name is None:
                for key in [k for k, o in store.items() if k[0] == ns and _matches(o, selector)]:
                    del store[key]
                return 200, {"kind": "Status", "status": "Success"}
            if method == "DELETE":
                if store.pop((ns, name), None) is None:
                    return 404, _status(404, "NotFound", f'{kind} "{name}" not found')
                return 200, {"kind": "Status", "status": "Success"}
            return 405, _status(405, "MethodNotAllowed", method)

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


@contextmanager
def api_server() -> Iterator[tuple[str, ApiState]]:
    """Serve on a free localhost port; yields the base URL and the state."""
    state = ApiState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
