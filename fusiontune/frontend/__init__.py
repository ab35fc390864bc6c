"""fusiontune.frontend (private; import from fusiontune)."""
