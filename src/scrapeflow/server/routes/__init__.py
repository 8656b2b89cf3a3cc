"""One routes module per resource: customers (status, refresh, accounts, movements), their
sync and events, jobs, webhooks, the schedule, operations (health, readiness, metrics) and the
dashboard's page."""
