"""`make fuzz`: mutated inputs of every kind through the public commands (tests/fuzz/harness.py).

    python bench/fuzz.py --seed 1 --count 10000          # the long run (docs/robustness.md)
    python bench/fuzz.py --seed 1 --case 4711            # one case again, with its outcome
    python bench/fuzz.py --kinds text,onnx --count 2000  # some kinds only
    python bench/fuzz.py --kinds jsondoc,legacy,api --count 300 --jobs 1  # json load, upgrade, the API
    python bench/fuzz.py --quick                         # what `make bench --quick` runs

Prints the outcomes by input kind and each distinct failure signature with a reproducer (the
case's command and mutation; `--keep DIR` also copies the first input of each signature there).
Exit 1 if any case failed in a kind of FIXED_KINDS, else 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz import harness  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--case", type=int, action="append", help="run only this case index (repeatable)")
    ap.add_argument("--kinds", default=",".join(harness.KINDS), help="comma-separated input kinds")
    ap.add_argument("--jobs", "-j", type=int, default=None, help="cases at once (default: CPU count)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--keep", type=Path, default=None, help="copy the first failing input of each signature here")
    ap.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    ap.add_argument("--quick", action="store_true", help="small seeds and 300 cases (a smoke run)")
    ap.add_argument("--repeat", type=int, default=None, help=argparse.SUPPRESS)  # make bench passes it through
    a = ap.parse_args(argv)
    kinds = tuple(k for k in a.kinds.split(",") if k)
    unknown = set(kinds) - set(harness.KINDS)
    if unknown:
        ap.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(harness.KINDS)}")
    count = 300 if a.quick and a.count == 10_000 else a.count

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty() and (done % 50 == 0 or done == total):
            print(f"\r{done}/{total}", end="", file=sys.stderr, flush=True)

    report = harness.run(a.seed, count, kinds=kinds, jobs=a.jobs, timeout=a.timeout, quick=a.quick,
                         keep=a.keep, start=a.start, cases=a.case, progress=progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(report.text())
    if a.case:
        for f in report.failures.values():
            print(json.dumps(f["example"], indent=1))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(report.to_dict(), indent=1, default=str))
    broken = report.failing_kinds() & set(harness.FIXED_KINDS)
    if broken:
        print(f"failures in kinds listed as fixed: {', '.join(sorted(broken))}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
