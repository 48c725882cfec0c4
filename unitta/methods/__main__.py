"""``python -m unitta.methods`` = ``unitta methods`` (= ``python -m unitta.contract``): check a method against the
contract, list the registered methods, print a method's search space (``unitta/contract/command.py``).

A command on the top layer like ``unitta/__main__.py`` (docs/layout.md): it runs the contract checker, which sits
above the methods; nothing imports this module, and nothing else under ``unitta/methods/`` imports upwards."""

import sys

from unitta.contract.command import main

if __name__ == "__main__":
    sys.exit(main())
