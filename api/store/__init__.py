"""Persistence: tables, engine, and keyword-only data-access functions per resource."""
