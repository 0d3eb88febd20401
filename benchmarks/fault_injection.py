"""Fault injection, the long run: SIGKILL the manager at 6 random points in each of install,
values upgrade, chart bump and deletion (24 kills), restart helm-controller, source-controller
and the API server in between, and print a table of kills, restarts, time to converge and
writes. `make test` runs the same with 2 kills per phase (tests/e2e/test_faults.py).

    .venv/bin/python benchmarks/fault_injection.py [--kills-per-phase 6] [--seed 7]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.cluster import LocalCluster  # noqa: E402
from tests.harness.faults import FaultRun, table  # noqa: E402
from tests.harness.flux import FluxStack  # noqa: E402
from tests.harness.module import module_on  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills-per-phase", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with (
        LocalCluster(progress=print) as cluster,
        FluxStack(cluster, progress=print) as flux,
        module_on(cluster, name="operator-faults") as operator,
    ):
        results = FaultRun(cluster, flux, operator, args.kills_per_phase, args.seed).run()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
