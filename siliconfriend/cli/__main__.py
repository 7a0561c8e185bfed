"""``python -m siliconfriend.cli``: the same as the ``siliconfriend`` command."""

import sys

from .main import main

sys.exit(main())
