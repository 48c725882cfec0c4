"""The names of the method profiles (which variant of each method a cell runs; ``unitta.methods.parts.profiles``).

Kept apart from the method registry so that ``unitta.cell`` and the config schemas know them without torch.
"""

from __future__ import annotations

__all__ = ["PROFILES"]

PROFILES = ("default", "reference")
