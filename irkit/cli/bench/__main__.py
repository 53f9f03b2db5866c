"""`python -m irkit.cli.bench`: irkit-bench."""

import sys

from irkit.cli.bench import main

sys.exit(main())
