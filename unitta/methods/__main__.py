"""``python -m unitta.methods`` = ``unitta methods``: the methods command lives in the command layer
(``unitta/contract/command.py``: check a method against the contract, list the registered methods)."""

import sys

from unitta.contract.command import main

if __name__ == "__main__":
    sys.exit(main())
