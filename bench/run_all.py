"""`make bench`: run every bench/bench_*.py in its own process and print what each prints.

Each benchmark runs ours and the reference on the same input in one run and prints the ratio.
`--quick` is passed through for smaller inputs (a smoke run); the figures in the docs come from
full runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: benchmarks not named bench_*.py (fidelity_fuzz.py: 30 random scripts, about 6 minutes;
#: fuzz.py: 10,000 mutated inputs through the commands, about 25 minutes on 2 cores;
#: whatif_check.py: predictions against real runs on the test bed, about 17 minutes, root only;
#: collectives_check.py: the network model's collectives on other clusters of it, about 5 minutes)
OTHERS = ("fidelity_fuzz.py", "fuzz.py", "scale_check.py", "whatif_check.py", "collectives_check.py")


def main() -> int:
    failed = []
    for script in [*sorted(HERE.glob("bench_*.py")), *(HERE / name for name in OTHERS)]:
        print(f"\n=== {script.name} ===", flush=True)
        rc = subprocess.call([sys.executable, str(script), *sys.argv[1:]])
        if rc:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
