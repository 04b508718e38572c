"""The DeepSpeed trainer: engine, losses, checkpointing."""
