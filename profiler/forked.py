"""`profiler.run_plan` in N local processes forked from a server that has imported it once,
with the environment torchrun gives each rank (RANK, WORLD_SIZE, MASTER_ADDR/PORT, one
thread). Each run then costs about a second instead of torchrun's interpreter start-ups; the
tests and the CPU benches run plans this way."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket

__all__ = ["free_port", "run_plan_forked"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _rank_main(rank: int, world: int, port: int, argv: list[str]) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    import torch

    torch.set_num_threads(1)
    from profiler.run_plan import main

    raise SystemExit(main(argv))


def run_plan_forked(world: int, argv: list[str], *, timeout_s: float) -> list[int | None]:
    """Run `profiler.run_plan ARGV` as `world` ranks; each rank's exit code (None: it was
    still running after `timeout_s` and was killed)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["profiler.run_plan"])
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, argv)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout_s)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    return codes
