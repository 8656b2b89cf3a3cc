"""Initial schema: customers, banks, accesses, contracts, accounts, movements.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 01:05:24.821649
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from scrapeflow.db._types import Money, UTCDateTime

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "customers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.Unicode(length=200), nullable=False),
        sa.Column(
            "scrape_state",
            sa.Enum(
                "idle",
                "in_progress",
                "all_updated",
                name="scrape_state",
                native_enum=False,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("scrape_started_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("scrape_finished_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_customers")),
        sa.UniqueConstraint("external_id", name=op.f("uq_customers_external_id")),
    )
    op.create_table(
        "financial_entities",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(length=64), nullable=False),
        sa.Column("name", sa.Unicode(length=200), nullable=False),
        sa.Column("country", sa.String(length=2), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_financial_entities")),
        sa.UniqueConstraint("code", name=op.f("uq_financial_entities_code")),
    )
    op.create_table(
        "accesses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("customer_id", sa.Integer(), nullable=False),
        sa.Column("entity_id", sa.Integer(), nullable=False),
        sa.Column("login", sa.String(length=200), nullable=False),
        sa.Column("secret", sa.LargeBinary(), nullable=False),
        sa.Column("traits", sa.JSON(), nullable=False),
        sa.Column(
            "scrape_state",
            sa.Enum(
                "idle",
                "in_progress",
                "all_updated",
                name="scrape_state",
                native_enum=False,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "result_code",
            sa.Enum(
                "success",
                "wrong_credentials",
                "user_locked",
                "two_factor_required",
                "bank_unavailable",
                "blocked",
                "timeout",
                "site_changed",
                "unknown",
                name="result_code",
                native_enum=False,
                length=32,
            ),
            nullable=True,
        ),
        sa.Column("scrape_started_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("scrape_finished_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("accounts_count", sa.Integer(), nullable=False),
        sa.Column("movements_count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["customer_id"],
            ["customers.id"],
            name=op.f("fk_accesses_customer_id_customers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["entity_id"],
            ["financial_entities.id"],
            name=op.f("fk_accesses_entity_id_financial_entities"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accesses")),
        sa.UniqueConstraint(
            "customer_id", "entity_id", "login", name=op.f("uq_accesses_customer_id")
        ),
    )
    op.create_table(
        "contracts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("access_id", sa.Integer(), nullable=False),
        sa.Column("bank_ref", sa.String(length=100), nullable=False),
        sa.Column("name", sa.Unicode(length=200), nullable=False),
        sa.ForeignKeyConstraint(
            ["access_id"],
            ["accesses.id"],
            name=op.f("fk_contracts_access_id_accesses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contracts")),
        sa.UniqueConstraint("access_id", "bank_ref", name=op.f("uq_contracts_access_id")),
    )
    op.create_table(
        "accounts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("access_id", sa.Integer(), nullable=False),
        sa.Column("contract_id", sa.Integer(), nullable=True),
        sa.Column("bank_ref", sa.String(length=100), nullable=False),
        sa.Column("iban", sa.String(length=34), nullable=True),
        sa.Column("number", sa.String(length=64), nullable=True),
        sa.Column("alias", sa.Unicode(length=200), nullable=False),
        sa.Column(
            "type",
            sa.Enum(
                "checking",
                "savings",
                "card",
                "loan",
                "other",
                name="account_type",
                native_enum=False,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("balance", Money(precision=18, scale=2), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "iban IS NOT NULL OR number IS NOT NULL", name=op.f("ck_accounts_iban_or_number")
        ),
        sa.ForeignKeyConstraint(
            ["access_id"],
            ["accesses.id"],
            name=op.f("fk_accounts_access_id_accesses"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["contract_id"],
            ["contracts.id"],
            name=op.f("fk_accounts_contract_id_contracts"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accounts")),
        sa.UniqueConstraint("access_id", "bank_ref", name=op.f("uq_accounts_access_id")),
    )
    op.create_table(
        "movements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("movement_key", sa.String(length=128), nullable=False),
        sa.Column("operation_date", sa.Date(), nullable=False),
        sa.Column("value_date", sa.Date(), nullable=False),
        sa.Column("amount", Money(precision=18, scale=2), nullable=False),
        sa.Column("description", sa.UnicodeText(), nullable=False),
        sa.Column("balance_after", Money(precision=18, scale=2), nullable=True),
        sa.Column("pending", sa.Boolean(), nullable=False),
        sa.Column("first_seen", UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_movements_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_movements")),
        sa.UniqueConstraint("account_id", "movement_key", name=op.f("uq_movements_account_id")),
    )


def downgrade() -> None:
    op.drop_table("movements")
    op.drop_table("accounts")
    op.drop_table("contracts")
    op.drop_table("accesses")
    op.drop_table("financial_entities")
    op.drop_table("customers")
