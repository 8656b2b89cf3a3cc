"""The sync cursor: customers count their movement writes, movements carry the version that
stored and last changed them, and removed movements leave a row behind.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 04:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from scrapeflow.db._types import UTCDateTime

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("customers") as batch:
        batch.add_column(
            sa.Column("sync_version", sa.BigInteger(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("movements") as batch:
        batch.add_column(
            sa.Column("first_version", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("changed_version", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.create_index("ix_movements_account_changed", ["account_id", "changed_version"])
    op.create_table(
        "movement_removals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("customer_id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("movement_key", sa.String(length=128), nullable=False),
        sa.Column("first_version", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("removed_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_movement_removals_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["customer_id"],
            ["customers.id"],
            name=op.f("fk_movement_removals_customer_id_customers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_movement_removals")),
    )
    op.create_index(
        "ix_movement_removals_customer_version",
        "movement_removals",
        ["customer_id", "version"],
    )


def downgrade() -> None:
    op.drop_index("ix_movement_removals_customer_version", table_name="movement_removals")
    op.drop_table("movement_removals")
    with op.batch_alter_table("movements") as batch:
        batch.drop_index("ix_movements_account_changed")
        batch.drop_column("changed_version")
        batch.drop_column("first_version")
    with op.batch_alter_table("customers") as batch:
        batch.drop_column("sync_version")
