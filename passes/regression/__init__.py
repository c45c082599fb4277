"""The users' pytest regression suites: the plugin (:mod:`.plugin`, loaded by pytest in every run,
imports no TVM), the ``eqsat`` fixture's TVM side (:mod:`.fixture`) and snapshots
(:mod:`.snapshots`)."""
