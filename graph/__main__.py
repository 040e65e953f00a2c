"""`python -m kernelblaster.graph` runs the `kernelblaster` command line."""

import sys

from kernelblaster.graph.app.cli import main

sys.exit(main())
