"""``python -m unitta.contract`` = ``unitta methods``: check a method against the contract, list the registered
methods, print a method's search space (``unitta/contract/command.py``). The command lives above the methods it
checks, so nothing under ``unitta/methods/`` imports upwards."""

import sys

from unitta.contract.command import main

if __name__ == "__main__":
    sys.exit(main())
