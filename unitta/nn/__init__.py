"""Small torch-only helpers shared by the model zoo and the TTA methods (below both layers)."""
