"""A GPU class names a kind of host to the fleet (its queues, its hosts, its hold model): the planner catalog's GPU
name (`a100-80gb`), or CPU_CLASS for a host without GPUs (CPU ranks with gloo: laptops, CI), which the catalog
describes as its CPU host class (planner.data.cpus)."""

from __future__ import annotations

CPU_CLASS = "cpu"
