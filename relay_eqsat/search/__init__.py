"""Growing e-graphs: the ``Runner`` (loop, limits, stop reason, report) and the schedulers
it runs, registered by name: TENSAT's sequential one (``tensat``), MCTS (``mcts``) and
``none`` (no search).

    base       Limits (the one limit check), StopReason, SearchReport
    runner     Runner and its rewrite step
    scheduler  the Scheduler hooks; SCHEDULERS, register_scheduler, get_scheduler
    tensat     TensatScheduler, run_tensat
    mcts       MCTSScheduler, MCTSOptions, the tree search (MCTS) and its EGraphEnvironment
"""
from .base import Limits, SearchReport, StopReason
from .mcts import MCTSOptions, MCTSScheduler
from .runner import Runner, Step
from .scheduler import SCHEDULERS, Scheduler, get_scheduler, register_scheduler
from .tensat import TensatScheduler, run_tensat

# the ``search`` option's choices, in this order
register_scheduler("tensat", TensatScheduler)
register_scheduler("mcts", MCTSScheduler)
register_scheduler("none", None)

__all__ = ["Limits", "StopReason", "SearchReport", "Runner", "Step", "Scheduler", "SCHEDULERS",
           "register_scheduler", "get_scheduler", "TensatScheduler", "run_tensat", "MCTSScheduler", "MCTSOptions"]
