"""relay_eqsat.search"""
