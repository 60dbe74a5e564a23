"""Studies over many runs: what docs/RESULTS.md answers, from the grids' rows under docs/data/grids/."""
