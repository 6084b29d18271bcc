"""What the torchtitan tests share: the plan's torchtitan arguments (titan_argv) and a fake
process group for torchtitan's device mesh (the fake_world fixture)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import pytest
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from planner.launch import Deployment, render
from planner.plan import Plan


def titan_argv(plan: Plan) -> list[str]:
    """The arguments torchtitan.train gets from the plan's torchrun command."""
    command = render(plan, Deployment(), target="torchrun", framework="torchtitan").commands[0]
    words = shlex.split(command)
    return words[words.index("torchtitan.train") + 1 :]


@pytest.fixture
def fake_world() -> Iterator[Any]:
    """A fake process group of the plan's world size (rank 0), for torchtitan's mesh."""

    def start(world_size: int) -> None:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()
