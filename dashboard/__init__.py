"""The web dashboard: a stateless HTTP process that is a gRPC client of the planner and executor services and shows
the fleet, every job's live curves and the planner's answer as pages (`tunefleet serve dashboard`)."""
