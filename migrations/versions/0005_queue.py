"""the search queue: jobs.progress_detail, and on PostgreSQL procrastinate's own schema

procrastinate (the PostgreSQL task queue the workers run searches from, api/queue) ships its
schema as one SQL script (`procrastinate.schema.SchemaManager.get_schema()`); it is applied
here, so `meshplan db upgrade` (or the start-up migration) is the one step that prepares a
database. SQLite has no queue: there the migration only adds the column.

Revision ID: 0005_queue
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_queue"
down_revision = "0004"
branch_labels = None
depends_on = None

# Everything procrastinate's schema creates is named procrastinate_*: tables, functions,
# triggers (dropped with their tables), enum and composite types.
DROP_PROCRASTINATE = r"""
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT tablename FROM pg_tables
           WHERE schemaname = current_schema() AND tablename LIKE 'procrastinate\_%' LOOP
    EXECUTE format('DROP TABLE IF EXISTS %I CASCADE', r.tablename);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS sig FROM pg_proc p
           JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = current_schema() AND p.proname LIKE 'procrastinate\_%' LOOP
    EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', r.sig);
  END LOOP;
  FOR r IN SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
           WHERE n.nspname = current_schema() AND t.typname LIKE 'procrastinate\_%'
             AND (t.typtype = 'e' OR (t.typtype = 'c' AND
                  (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c')) LOOP
    EXECUTE format('DROP TYPE IF EXISTS %I CASCADE', r.typname);
  END LOOP;
END $$;
"""


def _run_script(sql: str) -> None:
    """Run a multi-statement script on the migration's own psycopg connection (inside its
    transaction), without parameters, so its literal `%` signs are not placeholders."""
    op.get_bind().connection.driver_connection.execute(sql)  # type: ignore[union-attr]


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("progress_detail", sa.JSON(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        from procrastinate.schema import SchemaManager

        _run_script(SchemaManager.get_schema())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _run_script(DROP_PROCRASTINATE)
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("progress_detail")
