"""``python -m tools.preflight`` (``make preflight STAGE=...``)."""

import sys

from tools.preflight import main

sys.exit(main())
