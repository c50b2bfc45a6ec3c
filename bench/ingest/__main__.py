import sys

from bench.ingest.run import main

sys.exit(main())
