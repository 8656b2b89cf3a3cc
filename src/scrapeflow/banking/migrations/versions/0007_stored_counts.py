"""Accesses keep what their last scrape stored beside what it read: a batch that stored fewer
rows than it read (two accounts with one bank_ref, a writer that drops rows) shows, and ends
the access ``site_changed``. Existing accesses start with what they read.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("accesses") as batch:
        batch.add_column(
            sa.Column("accounts_stored", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("movements_stored", sa.Integer(), nullable=False, server_default="0")
        )
    op.execute(
        "UPDATE accesses SET accounts_stored = accounts_count, movements_stored = movements_count"
    )


def downgrade() -> None:
    with op.batch_alter_table("accesses") as batch:
        batch.drop_column("movements_stored")
        batch.drop_column("accounts_stored")
