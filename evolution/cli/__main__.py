"""`python -m dogma_evolve.evolution.cli`: the `evolve` command."""

import sys

from dogma_evolve.evolution.cli.main import main

sys.exit(main())
