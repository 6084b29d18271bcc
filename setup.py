"""The compiled parts: the simulator's longest-path kernel (planner/schedules/_kernel.c) and the
cost model's per-layer sums (planner/cost/_sums.c).

Everything else is in pyproject.toml. `optional=True`: without a C compiler the install still
succeeds and planner.schedules.kernel falls back to the same loop in Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "planner.schedules._kernel",
            ["planner/schedules/_kernel.c"],
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        ),
        Extension(
            "planner.cost._sums",
            ["planner/cost/_sums.c"],
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        ),
    ]
)
