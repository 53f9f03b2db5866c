"""Measurement: timers, statistics and the fingerprint every result carries."""
