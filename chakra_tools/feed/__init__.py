"""Feed: dependency-resolved nodes of one rank's trace for any simulator backend.

`ETFeeder(path)` streams a `.et` file in bounded memory and hands out issuable nodes in ascending
id (see feeder.py); `Backend` (protocol.py) is what a simulator implements to be driven by the
replayer.
"""

from .deadlock import DeadlockError
from .feeder import DEFAULT_WINDOW, ETFeeder
from .info import NodeInfo, node_info
from .protocol import Backend

__all__ = ["ETFeeder", "DeadlockError", "DEFAULT_WINDOW", "NodeInfo", "node_info", "Backend"]
