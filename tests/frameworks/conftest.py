"""The framework tests also use the launch tests' hand-built plans (launch_plans.make_plan)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "planner" / "launch"))
