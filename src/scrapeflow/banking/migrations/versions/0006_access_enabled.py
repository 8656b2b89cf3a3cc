"""Accesses can be disabled: kept with their data, left out of refreshes. Accounts remember
the earliest day a scrape read them from (a larger ``initial_days`` reaches back past it);
existing accounts start from their oldest stored movement. Customers and accesses in progress
name the job whose run holds them, so that job's next run takes them over at once.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 23:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("accesses") as batch:
        batch.add_column(
            sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.true())
        )
    with op.batch_alter_table("accounts") as batch:
        batch.add_column(sa.Column("read_since", sa.Date(), nullable=True))
    for table in ("customers", "accesses"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("held_by", sa.String(length=64), nullable=True))
    op.execute(
        "UPDATE accounts SET read_since = (SELECT min(operation_date) FROM movements "
        "WHERE movements.account_id = accounts.id)"
    )


def downgrade() -> None:
    for table in ("customers", "accesses"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("held_by")
    with op.batch_alter_table("accounts") as batch:
        batch.drop_column("read_since")
    with op.batch_alter_table("accesses") as batch:
        batch.drop_column("enabled")
