"""Helpers used across packages: atomic files (:mod:`.atomic`), log setup (:mod:`.logs`) and
secret redaction (:mod:`.redact`). Private: import the modules, not this package."""
