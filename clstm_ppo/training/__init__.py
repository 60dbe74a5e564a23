"""The training loop and what it keeps: one worker's runner, each rank's saved state, model
selection, the agreed stop, reporting and tracking, checkpoints and resource statistics. The
commands (train.py, adapt.py, tune.py) start it; nothing here calls back into them."""
