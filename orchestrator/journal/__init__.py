"""A run's journal on disk: what the parent must not lose when it dies (empty so far)."""
