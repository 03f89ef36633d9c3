"""Latency prediction (seed 002 §2.2, §5.2.3): Vivaldi, GNP and DTM."""
