"""The torch side of meshplan: reference models, per-layer and network profilers, plan runner.

Runs on the target machine under torch. Imports `planner` specs only, never `api`.
"""
