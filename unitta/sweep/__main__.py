"""``python -m unitta.sweep`` = ``unitta sweep``: runs ``unitta.sweep.main``."""

import sys

from unitta.sweep import main

if __name__ == "__main__":
    sys.exit(main())
