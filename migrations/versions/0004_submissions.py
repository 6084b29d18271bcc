"""submissions: plans sent to a cluster scheduler (Slurm, Kubernetes) and tracked to their end

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "submissions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column(
            "plan_id",
            sa.String(32),
            sa.ForeignKey("plans.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("framework", sa.String(16), nullable=False),
        sa.Column("partition", sa.String(200), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("scheduler_job_id", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=False), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=False), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=False), nullable=True),
        sa.Column("polled_at", sa.DateTime(timezone=False), nullable=True),
        sa.Column("cancel_requested_at", sa.DateTime(timezone=False), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=False),
        sa.Column("report", sa.Boolean(), nullable=False),
        sa.Column("report_token_hash", sa.String(64), nullable=True),
        sa.Column("token_expires_at", sa.DateTime(timezone=False), nullable=True),
        sa.Column("run_ids", sa.JSON(), nullable=False),
        sa.Column("deployment", sa.JSON(), nullable=False),
        sa.UniqueConstraint("report_token_hash", name="uq_submissions_report_token_hash"),
    )
    op.create_index("ix_submissions_tenant_created", "submissions", ["tenant", "created_at", "id"])
    op.create_index(
        "ix_submissions_tenant_plan", "submissions", ["tenant", "plan_id", "created_at"]
    )
    op.create_index("ix_submissions_state", "submissions", ["state", "backend"])


def downgrade() -> None:
    op.drop_index("ix_submissions_state", table_name="submissions")
    op.drop_index("ix_submissions_tenant_plan", table_name="submissions")
    op.drop_index("ix_submissions_tenant_created", table_name="submissions")
    op.drop_table("submissions")
