"""Building, running, timing and measuring programs on the target, shared by every TVM IR.

``target``: the host's LLVM target and whether a target runs here; ``build``: build, run and
compare outputs; ``timing``: timers, paired rounds and the one timing planner; ``kernels`` and
``measure_worker``: one operator built and timed alone for the cost model's ``Measurer``;
``torch_ops``: the torch-cuda measuring backend; ``decision``: the runtime check that decides
whether the pass keeps its result; ``verdicts``: the store of decided verdicts.
"""
