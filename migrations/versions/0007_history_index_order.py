"""plans: the filtered history's indexes end with the sort's tie-breaker `id`

The history orders by (created_at, id) and reads `page_size + 1` rows (api.store.plans): an
index that ends at `created_at` gives its rows in `created_at` order only, so PostgreSQL sorts
each run of equal timestamps again (an incremental sort) before the LIMIT. Ending with `id`
lets it read the index in the query's order and stop after the page. The model index also
carries `gpu` and `num_gpus`, and the GPU index `num_gpus`, after `id`: they do not change the
order, but conditions on them are then checked on the index entry, so a table row is read only
for the rows that match (EXPLAIN ANALYZE of the load bench's page, 100,000 plans: 239 -> 59
buffers).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# name: (columns before, columns after)
_INDEXES = {
    "ix_plans_tenant_model": (
        ["tenant", "model_name", "created_at"],
        ["tenant", "model_name", "created_at", "id", "gpu", "num_gpus"],
    ),
    "ix_plans_tenant_gpu": (
        ["tenant", "gpu", "num_gpus", "created_at"],
        ["tenant", "gpu", "created_at", "id", "num_gpus"],
    ),
    "ix_plans_tenant_hash": (
        ["tenant", "model_hash", "created_at"],
        ["tenant", "model_hash", "created_at", "id"],
    ),
    "ix_plans_tenant_request": (
        ["tenant", "request_hash", "created_at"],
        ["tenant", "request_hash", "created_at", "id"],
    ),
    "ix_plans_tenant_version": (
        ["tenant", "cost_model_version", "created_at"],
        ["tenant", "cost_model_version", "created_at", "id"],
    ),
    "ix_plans_tenant_calibration": (
        ["tenant", "calibration_id", "created_at"],
        ["tenant", "calibration_id", "created_at", "id"],
    ),
}


def _replace(after: bool) -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        for name, columns in _INDEXES.items():
            batch_op.drop_index(name)
            batch_op.create_index(name, columns[1] if after else columns[0], unique=False)


def upgrade() -> None:
    _replace(after=True)


def downgrade() -> None:
    _replace(after=False)
