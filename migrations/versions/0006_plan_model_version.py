"""plans: the cost-model version and calibration each plan was made with

Plans stored before carry NULL in both (the history shows their version as "unknown").

Revision ID: 0006
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005_queue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cost_model_version", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("calibration_id", sa.String(length=64), nullable=True))
        batch_op.create_index(
            "ix_plans_tenant_version", ["tenant", "cost_model_version", "created_at"], unique=False
        )
        batch_op.create_index(
            "ix_plans_tenant_calibration", ["tenant", "calibration_id", "created_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.drop_index("ix_plans_tenant_calibration")
        batch_op.drop_index("ix_plans_tenant_version")
        batch_op.drop_column("calibration_id")
        batch_op.drop_column("cost_model_version")
