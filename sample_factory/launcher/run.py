"""Sample Factory 2's launcher path: `python -m sample_factory.launcher.run --run=SWEEP ...` runs our launcher
(`python -m sample_factory.launcher`, __main__.py) with the same flags."""

from __future__ import annotations

import sys

from sample_factory.launcher.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
