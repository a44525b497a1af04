"""chakra-tools capture startup hook: Python imports `sitecustomize` at startup, before the
script, in every process started under `trace-capture` (this folder is first on PYTHONPATH).

The process that should capture (see `protocol.should_activate`) starts its capture session;
a process a capturing one started (`torch.multiprocessing.spawn`, Lightning's launcher) starts
one when it joins a process group (follow.py); a launcher notes its pid, so that a child it
starts without a rank (accelerate launch's one process) captures; every other process only pays
for reading one environment variable, and a DataLoader worker for one import hook. A
`sitecustomize` that this one shadows is then run as well, so a site's own setup still happens.
"""

import os
import sys


def _join(text: str, rank: int, world: int) -> None:
    from chakra_tools.capture import runtime  # torch, which the worker has imported by now

    runtime.join(text, rank, world)


def _activate() -> None:
    text = os.environ.get("CHAKRA_CAPTURE_CONFIG")
    if not text:
        return
    try:
        from chakra_tools.capture import protocol

        if protocol.should_follow():  # a rank of its own if it joins a process group
            from chakra_tools.capture import follow

            follow.follow(lambda rank, world: _join(text, rank, world))
            return
        cfg = protocol.CaptureConfig.from_env(text)
        if protocol.is_launcher(cfg):
            os.environ[protocol.ENV_LAUNCHER] = str(os.getpid())
            _quiet_interrupt()
        if not protocol.should_activate(cfg):
            return
        from chakra_tools.capture import runtime

        runtime.activate(cfg)
    except Exception as e:  # the user's script must still run, uncaptured, and say why
        print(f"trace-capture: capture not started in pid {os.getpid()}: "
              f"{type(e).__name__}: {e}", file=sys.stderr)


def _quiet_interrupt() -> None:
    """A launcher stopped by Ctrl-C ends with one line, not a traceback: torchrun raises its
    `SignalException` out of its monitor loop (30 lines), while its ranks and trace-capture say
    what happened. Any other exception, or another signal, is printed as before."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        interrupted = issubclass(kind, KeyboardInterrupt) or (
            kind.__name__ == "SignalException" and int(getattr(value, "sigval", 0) or 0) == 2)
        if not interrupted:
            previous(kind, value, tb)
            return
        print(f"{os.path.basename(sys.argv[0] or 'launcher')}: interrupted", file=sys.stderr)

    sys.excepthook = hook


def _chain() -> None:
    """Run the next `sitecustomize` on sys.path, the one this file shadows."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None or os.path.dirname(spec.origin or "") == here:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_activate()
_chain()
