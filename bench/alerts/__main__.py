import sys

from bench.alerts.run import main

sys.exit(main())
