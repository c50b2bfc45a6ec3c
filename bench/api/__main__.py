import sys

from bench.api.run import main

sys.exit(main())
