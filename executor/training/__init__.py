"""Training on one host: the only part of tunefleet that imports torch, transformers, PEFT and DeepSpeed."""
