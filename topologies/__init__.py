"""Example topologies; load one with ``hailstorm show topologies/wordcount.py``."""
