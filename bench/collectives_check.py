"""The network model's collectives against real ones on clusters it was not fitted on.

whatif_check.py judges the model through whole jobs, whose captures and real runs carry the
bed's noise (a stalled step, a slow set-up); this isolates the network. On the test bed
(chakra_tools/testbed), the probe runs on the capture cluster (2 nodes x 2 ranks, 100 Mbit/s) and
is fitted as `trace-convert calibrate --probe` fits it; then the probe runs again on each target
cluster (3 and 4 nodes, other rates), and every collective it measured on the whole job (every
kind, 1 KiB to 4 MiB) is priced by the first fit, sized to the target's ranks and with its
uplinks at the target's rate (`ClusterFit.priced`). Printed per kind and size: measured,
predicted, error; and per target the mean |error| of the sizes whose bytes dominate (64 KiB and
up) and of the smaller, latency-bound ones. Measured is what a job pays: for a call whose bytes
dominate, its repetitions' lower quartile (as the fit reads them: a busy host only adds time);
for a latency-bound one, their mean (a job of many such calls pays each one's wait, the
occasional long one included).

Needs root (network namespaces, tc) and torch; about 5 minutes on 2 cores (`--quick`: one target,
about 2). Run it on an otherwise idle machine.

    sudo .venv/bin/python bench/collectives_check.py [--quick] [--work DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent))
from whatif_check import CAPTURE, _label, probe  # noqa: E402  (the bed's clusters and probe runs)

from chakra_tools.core.probe import read_probe  # noqa: E402
from chakra_tools.replay.clusterfit import fit_probe  # noqa: E402
from chakra_tools.replay.links import parse_changes  # noqa: E402
from chakra_tools.testbed.cluster import unavailable  # noqa: E402

TARGETS = [(3, 2, 200.0), (4, 2, 100.0), (3, 2, 400.0)]
QUICK_TARGETS = [(3, 2, 200.0)]
#: a call of this many bytes or more is priced mostly by its bytes on the bed's links
BYTES_BOUND = 64 << 10


def check(work: Path, targets, capture_probe: Path | None = None) -> list[dict]:
    """Every whole-job collective of a probe on each target, priced by the capture cluster's fit."""
    fit = fit_probe(read_probe(capture_probe or probe(work)))
    rows = []
    for target in targets:
        name = f"probe-{target[0]}x{target[1]}-{target[2]:g}"
        kept = work / name / "probe.json"  # a kept --work folder's probe is not run again
        measured = read_probe(kept if kept.exists() else probe(work, target, name))
        changes = parse_changes([f"inter-node=x{target[2] / CAPTURE[2]:g}"])
        world = len(measured.hosts)
        rows += [_as_paid({"target": _label(target), **r}) for r in fit.priced(measured, changes) if r["ranks"] == world]
    return rows


def _as_paid(row: dict) -> dict:
    """A latency-bound call measured at its repetitions' mean (what a job of them pays)."""
    if row["size"] < BYTES_BOUND:
        row["measured_ns"], row["error"] = row["mean_ns"], row["mean_error"]
    return row


def _means(rows: list[dict]) -> str:
    """"big% / small%": the mean |error| of the bytes-bound calls and of the latency-bound ones."""
    def mean(xs):
        return f"{fmean(xs):.1%}" if xs else "-"

    return (f"{mean([abs(r['error']) for r in rows if r['size'] >= BYTES_BOUND])} / "
            f"{mean([abs(r['error']) for r in rows if r['size'] < BYTES_BOUND])}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="one target")
    p.add_argument("--work", type=Path, default=None, help="keep the probes here (and reuse those kept)")
    p.add_argument("--probe", type=Path, default=None,
                   help=f"a probe already run on the capture cluster ({_label(CAPTURE)}), not run again")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    why = unavailable()
    if why:
        print(f"collectives_check: skipped: {why}")
        return 0
    tmp = None if a.work else tempfile.TemporaryDirectory(prefix="collectives-")
    work = a.work or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows = check(work, QUICK_TARGETS if a.quick else TARGETS, a.probe)
    print(f"collectives on other clusters, priced by the fit of a probe on {_label(CAPTURE)}")
    print(f"{'target':<20}{'kind':<16}{'size':>9}{'measured':>12}{'predicted':>12}{'error':>9}")
    for r in rows:
        print(f"{r['target']:<20}{r['kind']:<16}{r['size']:>9}{r['measured_ns'] / 1e6:>10.2f}ms"
              f"{r['predicted_ns'] / 1e6:>10.2f}ms{r['error']:>+9.1%}")
    print(f"\nmean |error| per kind: calls of {BYTES_BOUND >> 10} KiB and up / smaller (latency-bound)")
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    print(f"{'target':<20}" + "".join(f"{k:>22}" for k in kinds) + f"{'all':>16}")
    for target in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == target]
        cells = [_means([r for r in mine if r["kind"] == k]) for k in kinds]
        print(f"{target:<20}" + "".join(f"{c:>22}" for c in cells) + f"{_means(mine):>16}")
    print(f"({time.time() - t0:.0f} s)")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
