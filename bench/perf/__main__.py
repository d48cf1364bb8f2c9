"""``python -m bench.perf`` = ``python -m bench perf``."""

import sys

from bench.perf import main

sys.exit(main())
