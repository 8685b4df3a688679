"""Development fixtures kept out of the product: tiny models built from configs, a private redis-server, and the
demo that `make run` runs. Used by make run, the tests and the benchmarks; not installed with tunefleet."""
