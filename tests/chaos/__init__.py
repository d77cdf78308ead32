"""The chaos tier: fault-injection scenarios (see harness.py)."""
