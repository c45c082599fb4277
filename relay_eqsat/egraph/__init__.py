"""relay_eqsat.egraph"""
