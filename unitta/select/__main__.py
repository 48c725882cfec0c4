"""``python -m unitta.select CONFIG.yaml`` = ``unitta select CONFIG.yaml``."""

import sys

from unitta.select.run import main

if __name__ == "__main__":
    sys.exit(main())
