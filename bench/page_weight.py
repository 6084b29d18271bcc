"""Plan page weight: bytes sent with and without gzip, and the time to render, for fixed
plans from small to GPT-3 175B at vpp=12 (the page a person opens for a long timeline).

Plans are evaluated by the cost model (no search) and stored in a throwaway SQLite database;
the pages are fetched through the app in-process (Starlette's TestClient).

    python bench/page_weight.py [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "api"))

from fastapi.testclient import TestClient
from svc_factories import evaluated_result
from svc_harness import ADMIN_KEY, make_settings

from api.app import create_app
from api.store.db import session_scope
from api.store.plans import insert_plan
from planner.catalog.presets import PRESETS

CASES: tuple[tuple[str, str, int, int, dict[str, Any]], ...] = (
    ("megatron-gpt-1.7b pp2", "megatron-gpt-1.7b", 32, 512, {"tp": 1, "pp": 2, "dp": 16}),
    ("llama-3-70b pp8 vpp4", "llama-3-70b", 512, 1024, {"tp": 8, "pp": 8, "dp": 8, "vpp": 4}),
    ("gpt-3-175b pp8 vpp12", "gpt-3-175b", 1024, 1536, {"tp": 8, "pp": 8, "dp": 16, "vpp": 12}),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(make_settings(f"sqlite:///{tmp}/bench.db"))
        with TestClient(app) as client:
            admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
            key = client.post("/v1/keys", json={"tenant": "bench"}, headers=admin).json()["key"]
            client.cookies.set("meshplan_key", key)
            for label, preset, gpus, batch, degrees in CASES:
                request = {
                    "model": PRESETS[preset].model_dump(mode="json"),
                    "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": gpus},
                    "training": {"global_batch_size": batch, "seq_length": 2048},
                }
                schedule = "interleaved-1f1b" if degrees.get("vpp", 1) > 1 else "1f1b"
                cand = {**degrees, "schedule": schedule, "recompute": "full"}
                result = evaluated_result(request, cand)
                with session_scope(app.state.meshplan.sessions) as session:
                    pid = insert_plan(
                        session,
                        tenant="bench",
                        request_hash=label.ljust(64, "x")[:64],
                        request=request,
                        result=result,
                        tags=[],
                    ).id
                times = []
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    plain = client.get(f"/plans/{pid}", headers={"Accept-Encoding": "identity"})
                    times.append(time.perf_counter() - start)
                url = f"/plans/{pid}"
                with client.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as wire:
                    sent = b"".join(wire.iter_raw())
                rows.append(
                    {
                        "plan": label,
                        "stages": len(result["plan"]["stages"]),
                        "bytes": len(plain.content),
                        "gzip_bytes": len(sent),
                        "render_s_median": round(statistics.median(times), 3),
                    }
                )
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'plan':24} {'stages':>6} {'bytes':>10} {'gzip bytes':>10} {'render s':>9}")
    for r in rows:
        print(
            f"{r['plan']:24} {r['stages']:>6} {r['bytes']:>10,} {r['gzip_bytes']:>10,} "
            f"{r['render_s_median']:>9}"
        )


if __name__ == "__main__":
    main()
