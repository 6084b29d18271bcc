"""meshplan's pure planning core: specs, catalogs, schedules, cost model, search, launch configs.

Nothing in this package performs I/O, reads the clock, or imports torch, sqlalchemy,
fastapi or httpx (enforced by the import-linter contracts in pyproject.toml).
"""

__version__ = "0.1.0"
