"""Benchmarks of the Kyma GPU module (make bench, make bench-scale, make bench-faults)."""
