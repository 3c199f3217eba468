"""``python -m tools.simulate ...``: see :mod:`tools.simulate`."""

import sys

from tools.simulate.driver import main

sys.exit(main())
