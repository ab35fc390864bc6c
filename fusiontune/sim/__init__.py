"""fusiontune.sim (private; import from fusiontune)."""
