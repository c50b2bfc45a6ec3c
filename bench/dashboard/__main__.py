import sys

from bench.dashboard.run import main

sys.exit(main())
