import sys

from bench.idle.run import main

sys.exit(main())
