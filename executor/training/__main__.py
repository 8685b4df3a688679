"""python -m executor.training plan.json: run a plan on this host (same as `tunefleet train`)."""

import gc
import sys

from executor.training.command import main

code = main()
# The interpreter's last full garbage collection walks every object that torch and transformers made at import:
# 1.1-1.4 s of CPU at every run's end on a 2-core machine (a fleet worker starts this module for each job it runs).
# Frozen objects are left out of it; objects are still finalised as their modules are torn down, and the OS takes
# back the memory. The ranks end without the teardown at all (executor.training.rank: recipe.exit_now).
gc.freeze()
sys.exit(code)
