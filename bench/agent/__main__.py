import sys

from bench.agent.run import main

sys.exit(main())
