"""Normalisation layers shared by methods: BDN, Balanced BN, Robust BN, IABN, UnMix-TNS, and helpers
to swap them into a model."""
