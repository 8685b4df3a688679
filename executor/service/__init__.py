"""The executor gRPC service: the servicer over fleet state, the Watch fan-out, the server and its metrics."""
