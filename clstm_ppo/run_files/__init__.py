"""What a run reads and writes, below every package that trains, walks or generates: checkpoint
files and their typed, versioned run state (loaded as data, never as code), the run folder, and the
metrics log with its wandb and TensorBoard mirrors (docs/TRAINING.md, "Checkpoints";
docs/RELIABILITY.md)."""
