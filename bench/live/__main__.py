import sys

from bench.live.run import main

sys.exit(main())
