"""Catalogs: hardware (GPUs and links) and analytic model families."""
