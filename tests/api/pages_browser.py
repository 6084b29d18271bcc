"""A small Chrome DevTools Protocol driver for the page tests: Debian's headless chromium,
driven over its remote-debugging WebSocket (websocket-client), so a test can fill a form,
click, follow links and take screenshots as a person would.

Protocol reference: https://chromedevtools.github.io/devtools-protocol/ (Page, Runtime,
Emulation domains)."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import websocket

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


class Browser:
    """One chromium with one tab. `javascript=False` disables the pages' scripts (the
    DevTools' own evaluations still run, as reading the DOM is how the test looks)."""

    def __init__(self, profile_dir: Path, *, javascript: bool = True, width: int = 1400) -> None:
        self.profile_dir = profile_dir
        self.javascript = javascript
        self.width = width
        self._ids = itertools.count(1)

    def __enter__(self) -> Browser:
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        port_file = self.profile_dir / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={self.profile_dir}",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                f"--window-size={self.width},1000",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        tabs = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(t for t in tabs if t["type"] == "page")
        self.ws = websocket.create_connection(
            page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True
        )
        self.call("Page.enable")
        if not self.javascript:
            self.call("Emulation.setScriptExecutionDisabled", value=True)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result

    def js(self, expression: str) -> Any:
        """The value of `expression` in the page (by value: strings, numbers, lists)."""
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 60.0) -> Any:
        """Poll until `expression` is truthy in a fully loaded page; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.js("document.readyState") == "complete":
                    value = self.js(expression)
                    if value:
                        return value
            except RuntimeError:
                pass  # a navigation replaced the context mid-call
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} stayed false; at {self.url()}")
            time.sleep(0.2)

    def go(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for(f"location.href.startsWith({json.dumps(url.split('?')[0])})")

    def url(self) -> str:
        try:
            return str(self.js("location.href"))
        except RuntimeError:
            return "?"

    def text(self) -> str:
        return str(self.js("document.body ? document.body.innerText : ''"))

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at `path`."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
