"""``python -m unitta.track RESULTS_DIR --mlflow URI`` = ``unitta track RESULTS_DIR --mlflow URI``."""

import sys

from unitta.track.command import main

if __name__ == "__main__":
    sys.exit(main())
