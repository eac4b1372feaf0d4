"""``python -m xgemm`` is the ``xgemm`` command."""

import sys

from .cli import main

sys.exit(main())
