"""python -m executor.training plan.json: run a plan on this host (same as `tunefleet train`)."""

import sys

from executor.training.command import main

sys.exit(main())
