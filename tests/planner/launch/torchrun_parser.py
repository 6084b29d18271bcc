"""torch's own torchrun parser, for the tests that check emitted torchrun commands.

Kept apart from launch_plans, and torch imported on first use, so that the launch tests that
do not parse a torchrun command collect and run without torch installed.
"""

from __future__ import annotations

import argparse

import pytest


def parse_torchrun(argv: list[str]) -> argparse.Namespace:
    """torch's own torchrun parser (PET_* variables change its defaults); skips without torch."""
    torch_run = pytest.importorskip("torch.distributed.run")
    args: argparse.Namespace = torch_run.parse_args(argv)
    return args
