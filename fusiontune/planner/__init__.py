"""fusiontune.planner (private; import from fusiontune)."""
