"""The benchmarks: run as modules from the repository root
(`python3 -m bench.bench`, which tools/bench does)."""
