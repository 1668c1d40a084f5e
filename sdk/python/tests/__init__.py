"""Tests of the opensandbox SDK (python3 -m unittest; see harness.py)."""
