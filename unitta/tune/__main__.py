"""``python -m unitta.tune`` = ``unitta tune``: runs ``unitta.tune.main``."""

import sys

from unitta.tune import main

if __name__ == "__main__":
    sys.exit(main())
