"""The plan contract shared by the planner and the executor: typed specs, proto <-> domain conversion, bounds,
the DeepSpeed config, the run configuration a plan becomes, and the progress-event format. Imports no torch,
Redis or rq, and nothing of the planner, the fleet or the executor."""
