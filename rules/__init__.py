"""Rule sets shipped as data files (read through importlib.resources)."""
