"""fusiontune.ir (private; import from fusiontune)."""
