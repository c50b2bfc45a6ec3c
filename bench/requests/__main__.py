import sys

from bench.requests.run import main

sys.exit(main())
