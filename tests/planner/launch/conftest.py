"""Launch tests: torchrun's parser must not see PET_* variables."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_pet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's parser takes defaults from PET_* variables; clear them for every test."""
    for key in list(os.environ):
        if key.startswith("PET_"):
            monkeypatch.delenv(key)
