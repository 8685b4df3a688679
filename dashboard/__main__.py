import sys

from dashboard.serve import main

sys.exit(main())
