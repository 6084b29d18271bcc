"""calibrations: stored calibration documents (meshplan calibrate, POST /v1/calibrations)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "calibrations",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("gpu", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "id"),
    )
    with op.batch_alter_table("calibrations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_calibrations_tenant_created", ["tenant", "created_at", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("calibrations", schema=None) as batch_op:
        batch_op.drop_index("ix_calibrations_tenant_created")
    op.drop_table("calibrations")
