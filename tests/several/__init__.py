"""An app of the several-databases test's jobs (tests/several_settings.py installs it)."""
