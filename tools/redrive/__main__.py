"""``python -m tools.redrive``: see the package's docstring."""

import sys

from tools.redrive.cli import main

sys.exit(main())
