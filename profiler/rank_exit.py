"""How a torch.distributed rank started as a program (torchrun, srun) ends: with its exit code,
without the interpreter's finalization.

A rank's gloo process groups outlive `destroy_process_group`: torch keeps the C++ groups, so
their native threads (two `pt_gloo_runloop` workers per group, a `gloo_tcp_loop` per device)
are still running when `main` returns. While the interpreter finalizes, Python ends any native
thread that takes the GIL with `pthread_exit` (CPython 3.11-3.13, `PyGILState_Ensure`), and that
unwinding through a C++ `noexcept` frame calls `std::terminate`: the rank dies with SIGABRT,
"terminate called without an active exception", after a run that completed, and torchrun or
Slurm reports the job failed. It is a race, so it shows under load. The same runs in forked
processes, which `multiprocessing` ends with `os._exit`, never reach finalization.

`exit_rank` flushes the logging handlers and the standard streams and ends the process with
`os._exit`. A rank leaves nothing to finalization: its report is written and closed, or posted
synchronously, before `main` returns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_rank"]


def exit_rank(code: int) -> NoReturn:
    """End this process now with `code`, after flushing what it printed or logged."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # a closed or broken stream has nothing left to lose
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
