"""An app of the failover test's jobs (tests/failover_settings.py installs it; docs/operations.md)."""
