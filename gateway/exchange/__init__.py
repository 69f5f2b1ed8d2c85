"""The exchange layer (docs/architecture.md, "The exchange layer"): exchanges as generators of
commands, pure (no I/O; tests/test_purity.py)."""
