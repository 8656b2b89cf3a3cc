"""Helpers used across packages: atomic files (:mod:`.atomic`), the egress policy
(:mod:`.egress`), SIGTERM as an interrupt (:mod:`.interrupts`), log setup (:mod:`.logs`),
secret redaction (:mod:`.redact`), stopping background tasks (:mod:`.tasks`). Private: import the
modules, not this package."""
