"""Run the reduction's property tests far past the suite's derandomized examples.

The suite (tests/test_por_properties.py) runs a few hundred fixed examples on every commit. This
script draws N fresh random schedules per property, from a seed, with the same strategy (decrements,
wrapping adds, set after add, every wait comparison included) and writes the counts to
scripts/results/sweep_por_properties.json:

    python scripts/sweep_por_properties.py --examples 5000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

import test_por_properties as props  # noqa: E402

PROPERTIES = {
    "reduction_preserves_terminal_states": props.test_reduction_preserves_terminal_states,
    "reduction_finds_the_same_violations": props.test_reduction_finds_the_same_violations,
    "dfs_and_bfs_agree": props.test_dfs_and_bfs_agree,
    "reduction_is_exact_with_fifo_connections": props.test_reduction_is_exact_with_fifo_connections,
    "reduction_is_exact_with_accesses_into_collectives": props.test_reduction_is_exact_with_accesses_into_collectives,
    "reduction_is_exact_with_grouped_collectives": props.test_reduction_is_exact_with_grouped_collectives,
    "reduction_is_exact_with_threads": props.test_reduction_is_exact_with_threads,
}
# the strategy each property draws from in the suite (the first three: the plain one)
STRATEGIES = {
    "reduction_is_exact_with_fifo_connections": lambda: props.plans(max_events=7, required="fifo"),
    "reduction_is_exact_with_accesses_into_collectives":
        lambda: props.plans(max_events=6, required="into_collective"),
    "reduction_is_exact_with_grouped_collectives": lambda: props.plans(max_events=3, required="grouped_collective"),
    "reduction_is_exact_with_threads": props.threaded_plans,
}


def run(name: str, examples: int, seed_value: int) -> dict:
    """Run one property on `examples` fresh examples; count what the strategy produced."""
    inner = PROPERTIES[name].hypothesis.inner_test
    stats = {"examples": 0, "with_wrapping_values": 0, "with_waits": 0}

    def counted(plan):
        stats["examples"] += 1
        flat = [d for ops in plan[2] for d in ops if isinstance(d, tuple)] if isinstance(plan, tuple) else []
        stats["with_waits"] += any(d[0] == "wait" for d in flat)
        stats["with_wrapping_values"] += any(isinstance(x, int) and x >= 1 << 63 for d in flat for x in d)
        inner(plan)

    strategy = STRATEGIES.get(name, props.plans)()
    test = seed(seed_value)(settings(max_examples=examples, deadline=None, derandomize=False, database=None,
                                     suppress_health_check=list(HealthCheck))(given(strategy)(counted)))
    started = time.perf_counter()
    failure = None
    try:
        test()
    except Exception as exc:  # a counterexample: report it, do not hide it
        failure = f"{type(exc).__name__}: {exc}"
    return {"property": name, **stats, "seconds": round(time.perf_counter() - started, 1),
            "passed": failure is None, "failure": failure}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--property", choices=sorted(PROPERTIES), action="append")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "sweep_por_properties.json"))
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip()
    results = []
    for name in args.property or list(PROPERTIES):
        result = run(name, args.examples, args.seed)
        print(json.dumps(result), flush=True)
        results.append(result)
    with open(args.out, "w") as handle:
        json.dump({"seed": args.seed, "examples_per_property": args.examples, "commit": commit,
                   "python": platform.python_version(), "results": results}, handle, indent=2)
        handle.write("\n")
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
