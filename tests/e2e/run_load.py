"""``make load``: the load run of ``tests/e2e/load.py`` on its own, sized from the command line.

The offline environment is set before anything starts jsii or boto3 (both read it then).
"""

from __future__ import annotations

from tests.support.offline import go_offline

go_offline()

from tests.e2e.load import main  # noqa: E402 - after the environment is set

if __name__ == "__main__":
    raise SystemExit(main())
