"""``python -m analytic.cli``: the ``analytic`` command."""

import sys

from .main import main

sys.exit(main())
