"""Rule sets shipped as data files: installed as relay_eqsat.rulesets (read through importlib.resources)."""
