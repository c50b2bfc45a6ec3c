import sys

from bench.placement.run import main

sys.exit(main())
