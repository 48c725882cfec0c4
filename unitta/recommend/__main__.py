"""``python -m unitta.recommend`` = ``unitta recommend``: runs ``unitta.recommend.main``."""

import sys

from unitta.recommend import main

if __name__ == "__main__":
    sys.exit(main())
