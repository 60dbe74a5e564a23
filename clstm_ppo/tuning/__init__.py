"""Hyperparameter search and seed sweeps on Optuna (``clstm-ppo-tune``): the search space in YAML
(space.py), trials run as train commands in subprocesses and pruned through their metrics.jsonl
(runs.py, objective.py), the study on SQLite or any SQLAlchemy URL (study.py), the best config,
importances and history (study_outputs.py), and a fixed grid shared between processes (grid.py, for
scripts/studies/reproduce_paper.py --storage)."""
