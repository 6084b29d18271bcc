"""Alembic environment and revisions for the meshplan service database."""
