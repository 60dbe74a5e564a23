"""The lab beside the trainer: the studies that ask what it learns and the benchmarks that time it (docs/RESULTS.md,
docs/BENCHMARKS.md). Installed for development (``make``), run from the repository's scripts/, never in the
clstm_ppo wheel: a user's install is the trainer and its commands."""
