"""Where a run starts before its first PPO update: the encoder pretrained on next-bar returns or
meta-learned on few-shot tasks, and the policy cloned from the best fixed rule
(docs/TRAINING.md)."""
