"""Accesses and customers carry their launcher's heartbeat interval; customers their heartbeat.

The watchdog never resets what a live launcher still stamps: a row is stale only after three
of its own launcher's intervals without a beat, whatever limit the watchdog is given.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from scrapeflow.db._types import UTCDateTime

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("accesses") as batch:
        batch.add_column(sa.Column("heartbeat_seconds", sa.Float(), nullable=True))
    with op.batch_alter_table("customers") as batch:
        batch.add_column(sa.Column("heartbeat_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("heartbeat_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("customers") as batch:
        batch.drop_column("heartbeat_seconds")
        batch.drop_column("heartbeat_at")
    with op.batch_alter_table("accesses") as batch:
        batch.drop_column("heartbeat_seconds")
