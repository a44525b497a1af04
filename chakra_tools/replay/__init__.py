"""Replay: a multi-rank discrete-event replayer with ASTRA-sim's analytical network model.

    from chakra_tools.replay import replay, AnalyticalBackend, load_network, load_system
    backend = AnalyticalBackend(load_network("net.yml"), load_system("sys.json"))
    result = replay("out/trace", backend)
    print(result.table())

What `trace-replay` does (validate, replay on the system its options name, compare with the
measured step) is one call; `--out` and `--timeline` are the result's two writers:

    from chakra_tools.replay import AS_CAPTURED, SystemSpec, replay_rankset
    result = replay_rankset("out/ddp", SystemSpec(network="net.yml"),
                            modes=AS_CAPTURED, manifest="traces/ddp/manifest.json")
    result.write("result.json"); result.timeline().write("timeline.json.gz")

api.py (opening a rank set, capture modes, `replay` and `replay_rankset`), engine.py (the kernel,
its resources and the per-kind handlers), timing.py (where durations come from: `Modelled`,
`Staggered`, `Captured`), backend.py (compute, memory, network cost), collectives.py (the
per-algorithm registry of phases; steps.py: the same member by member; message.py: one message),
replicas.py (one rank per class of replicas), config.py (ASTRA-sim's config files), result.py (statistics, critical
path, JSON, timeline), fidelity.py (against a capture's measured steps), calibrate.py
(communication from a capture's recorded times, waiting removed: `--comm calibrated`), recorded.py
(host time and completions from a capture's timeline: `--host-time timeline`).
"""

from .api import RanksetRefused, open_rankset, replay, replay_rankset, run_replay
from .modes import AS_CAPTURED, CaptureModes
from .backend import AnalyticalBackend, Scales
from .spec import SystemSpec
from .config import (Dim, MemoryConfig, NetworkConfig, SystemConfig, default_network, load_memory,
                     load_network, load_system)
from .engine import Replayer
from .resources import DEFAULT_LIMITS, Resources, parse_limits
from .fidelity import compare_with_manifest
from .result import ReplayResult
from .timing import Captured, Modelled, Staggered

__all__ = ["AnalyticalBackend", "Scales", "SystemSpec", "Dim", "MemoryConfig", "NetworkConfig",
           "SystemConfig", "default_network", "load_memory", "load_network", "load_system",
           "DEFAULT_LIMITS", "AS_CAPTURED", "CaptureModes", "replay_rankset", "RanksetRefused",
           "run_replay", "Replayer", "Resources", "open_rankset", "parse_limits", "replay",
           "compare_with_manifest", "ReplayResult", "Captured", "Modelled", "Staggered"]
