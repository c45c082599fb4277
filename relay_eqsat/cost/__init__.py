"""relay_eqsat.cost"""
