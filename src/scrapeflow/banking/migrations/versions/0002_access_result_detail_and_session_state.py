"""Accesses keep a failure detail and an encrypted session state (2FA, trusted device).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 01:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("accesses") as batch:
        batch.add_column(sa.Column("result_detail", sa.Unicode(length=500), nullable=True))
        batch.add_column(sa.Column("session_state", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("accesses") as batch:
        batch.drop_column("session_state")
        batch.drop_column("result_detail")
