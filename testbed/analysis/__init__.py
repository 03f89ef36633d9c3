"""Ground-truth oracles, metrics, tables and plots."""
