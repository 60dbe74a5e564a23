"""What the benchmark and GPU-check scripts under scripts/bench/ and scripts/ops/ run: their steps and
measurements as functions (docs/BENCHMARKS.md has the figures)."""
