"""Schedulers that grow e-graphs: TENSAT's sequential one (``tensat``) and MCTS (``mcts``)."""
from .base import Limits, Scheduler, SearchReport
from .tensat import TensatScheduler, run_tensat

__all__ = ["Limits", "Scheduler", "SearchReport", "TensatScheduler", "run_tensat"]
