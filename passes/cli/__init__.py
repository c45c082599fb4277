"""The TVM-backed subcommands of ``relay-eqsat`` (registered lazily from
:data:`relay_eqsat.cli.COMMANDS`): ``optimize`` and ``tvmc`` (:mod:`.optimize`), ``measure``,
``profile``; model files read with one clear error per bad input (:mod:`.model_file`)."""
