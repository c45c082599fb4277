"""relay_eqsat.extract"""
