"""The `tunefleet` command: the process's entry point, above every layer.

It hands each command to the layer that owns it: `worker` to the fleet worker, `train` to the training run,
`serve planner|executor|dashboard` to that service, and everything else (planning, the fleet's client commands,
health) to the CLI in `clients/`, which imports neither the executor nor the dashboard. Each branch imports only
what it runs, so `tunefleet --help` and the planner's commands work on an install without the training stack.
"""
