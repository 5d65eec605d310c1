"""``make load``: the load run of ``local/load/run.py`` on its own, sized from the command line.

The offline environment is set before anything starts jsii or boto3 (both read it then).
"""

from __future__ import annotations

from embedded.offline import go_offline

go_offline()

from local.load.run import main  # noqa: E402 - after the environment is set

if __name__ == "__main__":
    raise SystemExit(main())
