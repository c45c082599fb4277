"""The measuring worker process of a ``Measurer``: ``python -m relay_eqsat.cost.worker FD``.

FD is this process's end of a socket pair; the first message on it is
(target, backend, config, hook), then jobs as ``measure._worker_main`` reads
them. Started by module name, so the parent's ``__main__`` script is never run
again here (multiprocessing's spawn would import it).
"""
import sys
from multiprocessing.connection import Connection

from relay_eqsat.cost.measure import _worker_main

if __name__ == "__main__":
    conn = Connection(int(sys.argv[1]))
    _worker_main(conn, *conn.recv())
