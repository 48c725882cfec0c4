"""Normalisation layers shared by methods: BDN, Balanced BN, Robust BN, IABN, UnMix-TNS (``<layer>_layer.py`` where
a method of the same name exists), and helpers to swap them into a model."""
