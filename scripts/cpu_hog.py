#!/usr/bin/env python3
"""A CPU hog that toggles: one busy core on for a random 0.05-0.6 s, off for as long, until
killed or ``--seconds`` have passed. Run it beside a benchmark to load the machine the way a
noisy neighbour does (the load the controller's filter has to tell from arm costs).

    .venv/bin/python scripts/cpu_hog.py --seconds 300 &
    .venv/bin/python scripts/bench_cpu_e2e.py --drafters draft-noise-medium --reps 2
"""

from __future__ import annotations

import argparse
import random
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    parser.add_argument("--seed", type=int, default=0, help="seed of the on/off durations")
    parser.add_argument("--min-s", type=float, default=0.05, help="shortest on or off phase")
    parser.add_argument("--max-s", type=float, default=0.6, help="longest on or off phase")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    end = time.monotonic() + args.seconds
    busy = True
    while time.monotonic() < end:
        phase_end = time.monotonic() + rng.uniform(args.min_s, args.max_s)
        if busy:
            x = 0
            while time.monotonic() < phase_end:
                x += 1  # spin
        else:
            time.sleep(max(0.0, phase_end - time.monotonic()))
        busy = not busy
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
