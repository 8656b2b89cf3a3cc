"""Accesses carry the heartbeat of the launcher holding them (for the watchdog).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 01:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from scrapeflow.db._types import UTCDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("accesses") as batch:
        batch.add_column(sa.Column("heartbeat_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("accesses") as batch:
        batch.drop_column("heartbeat_at")
