"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key_hash"),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_tenant"), ["tenant"], unique=False)

    op.create_table(
        "idempotency_keys",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_body", sa.JSON(), nullable=True),
        sa.Column("response_headers", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "key"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("inflight_key", sa.String(length=140), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("plan_id", sa.String(length=32), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("inflight_key", name="uq_jobs_inflight_key"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_tenant"), ["tenant"], unique=False)

    op.create_table(
        "plans",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("model_name", sa.String(length=200), nullable=False),
        sa.Column("model_hash", sa.String(length=64), nullable=False),
        sa.Column("gpu", sa.String(length=64), nullable=False),
        sa.Column("num_gpus", sa.Integer(), nullable=False),
        sa.Column("schedule", sa.String(length=32), nullable=False),
        sa.Column("tp", sa.Integer(), nullable=False),
        sa.Column("pp", sa.Integer(), nullable=False),
        sa.Column("dp", sa.Integer(), nullable=False),
        sa.Column("vpp", sa.Integer(), nullable=False),
        sa.Column("micro_batch_size", sa.Integer(), nullable=False),
        sa.Column("step_time_s", sa.Float(), nullable=False),
        sa.Column("tokens_per_s", sa.Float(), nullable=False),
        sa.Column("bubble_fraction", sa.Float(), nullable=False),
        sa.Column("peak_memory_bytes", sa.Float(), nullable=False),
        sa.Column("search_wall_s", sa.Float(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.create_index(
            "ix_plans_tenant_created", ["tenant", "created_at", "id"], unique=False
        )
        batch_op.create_index(
            "ix_plans_tenant_gpu", ["tenant", "gpu", "num_gpus", "created_at"], unique=False
        )
        batch_op.create_index(
            "ix_plans_tenant_hash", ["tenant", "model_hash", "created_at"], unique=False
        )
        batch_op.create_index(
            "ix_plans_tenant_model", ["tenant", "model_name", "created_at"], unique=False
        )
        batch_op.create_index(
            "ix_plans_tenant_request", ["tenant", "request_hash", "created_at"], unique=False
        )
        batch_op.create_index("ix_plans_tenant_step", ["tenant", "step_time_s", "id"], unique=False)
        batch_op.create_index("ix_plans_tenant_tps", ["tenant", "tokens_per_s", "id"], unique=False)

    op.create_table(
        "profiles",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("model_hash", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.create_index(
            "ix_profiles_tenant_created", ["tenant", "created_at", "id"], unique=False
        )

    op.create_table(
        "plan_tags",
        sa.Column("plan_id", sa.String(length=32), nullable=False),
        sa.Column("tag", sa.String(length=200), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("plan_id", "tag"),
    )
    with op.batch_alter_table("plan_tags", schema=None) as batch_op:
        batch_op.create_index("ix_plan_tags_tenant_tag", ["tenant", "tag", "plan_id"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("plan_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runs_tenant_plan", ["tenant", "plan_id", "created_at"], unique=False
        )


def downgrade() -> None:

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_tenant_plan")

    op.drop_table("runs")
    with op.batch_alter_table("plan_tags", schema=None) as batch_op:
        batch_op.drop_index("ix_plan_tags_tenant_tag")

    op.drop_table("plan_tags")
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.drop_index("ix_profiles_tenant_created")

    op.drop_table("profiles")
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.drop_index("ix_plans_tenant_tps")
        batch_op.drop_index("ix_plans_tenant_step")
        batch_op.drop_index("ix_plans_tenant_request")
        batch_op.drop_index("ix_plans_tenant_model")
        batch_op.drop_index("ix_plans_tenant_hash")
        batch_op.drop_index("ix_plans_tenant_gpu")
        batch_op.drop_index("ix_plans_tenant_created")

    op.drop_table("plans")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_tenant"))

    op.drop_table("jobs")
    op.drop_table("idempotency_keys")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_tenant"))

    op.drop_table("api_keys")
