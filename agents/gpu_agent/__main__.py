"""Allows ``python -m agents.gpu_agent`` where the console script is not installed."""

import sys

from agents.gpu_agent.cli import main

sys.exit(main())
