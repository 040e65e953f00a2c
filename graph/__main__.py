"""`python -m graph` runs the `kernelblaster` command line."""

import sys

from graph.cli import main

sys.exit(main())
