"""fusiontune.search (private; import from fusiontune)."""
