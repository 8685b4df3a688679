"""The executor side of tunefleet: service/ (gRPC over fleet state), worker/ (runs jobs on a host) and training/
(runs a plan on one host; files only)."""
