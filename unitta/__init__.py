"""unitta: the UniTTA benchmark (Markov test streams), the UniTTA framework (BDN + COFA), twelve
TTA baselines, and a Ray sweep orchestrator with Parquet results.

Subpackages import lazily: ``import unitta`` stays fast (no torch, no Ray).
"""

__version__ = "0.1.0"
