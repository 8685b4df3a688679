"""Training on one host: the only package that imports torch, DeepSpeed and PEFT.

Importing it changes nothing in the process: what a training process sets up for itself (the environment's DeepSpeed
ops and ninja, bitsandbytes hidden where a plan does not quantise, DeepSpeed's Muon modules stood in for) is
executor.training.process.prepare, which each entry point calls first: the launcher (`python -m executor.training`,
`tunefleet train`) and each rank (executor.training.rank).
"""
