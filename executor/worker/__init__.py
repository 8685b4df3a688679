"""The fleet worker: the claim loop, supervision of a training process tree, drain, gangs, and the single
publisher of a job's progress events (it tails the run's progress.jsonl)."""
