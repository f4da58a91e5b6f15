"""`python -m evolution.cli`: the `evolve` command."""

import sys

from evolution.cli.main import main

sys.exit(main())
