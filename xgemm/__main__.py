"""``python -m xgemm`` is the ``xgemm`` command."""

import sys

from .tools.cli import main

sys.exit(main())
