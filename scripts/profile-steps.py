#!/usr/bin/env python3
"""Per-step cycles of a run's profile: for each bulk-synchronous step of the `run` call, the
growth of the slowest tile's compute, exchange and total cycle counters (the samples are
cumulative per tile). Used for the breakdowns in docs/perf.md:

    ipu run attention-flash --artifacts DIR
    python3 scripts/profile-steps.py DIR/execution.profile.json
"""
import collections
import json
import sys


def main(path):
    profile = json.load(open(path))
    by_step = collections.defaultdict(list)
    for sample in profile["samples"]:
        by_step[sample["step"]].append(sample)
    last = {"compute_cycles": 0, "exchange_cycles": 0, "cycles": 0}
    print("step kind compute exchange total")
    for step in sorted(by_step):
        samples = by_step[step]
        now = {k: max(s[k] for s in samples) for k in last}
        print(
            step,
            samples[0]["kind"],
            now["compute_cycles"] - last["compute_cycles"],
            now["exchange_cycles"] - last["exchange_cycles"],
            now["cycles"] - last["cycles"],
        )
        last = now


if __name__ == "__main__":
    main(sys.argv[1])
