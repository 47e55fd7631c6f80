#!/usr/bin/env python3
"""The bare-SDK floor (examples/sdk_floor.rs), counted by callgrind: instructions per round of the
requests a class of delivery makes (`--calls`, sdk_floor's CALLS: `UPUP` a new credit, `UP` a
duplicate on a store returning ALL_OLD, `UGP` on dynalite; `PPPPP` by default), unconditional,
through a client built as payhook builds its own. The program runs
twice under callgrind, with --low and --high rounds; (high total - low total) / (high - low) is
one round's count with start-up and tear-down cancelled out, so it moves far less than 1%
between runs on a loaded machine. Prints JSON.

  python3 benches/floor.py --floor target/release/examples/sdk_floor --out target/bench/cg
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from instructions import totals  # noqa: E402  (one reader of callgrind's totals line)


def count(floor, rounds, out, calls):
    path = os.path.join(out, f"floor.{calls}.{rounds}.out")
    env = dict(os.environ, ROUNDS=str(rounds), CALLS=calls)
    subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={path}", floor],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return totals(path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--floor", required=True, help="the sdk_floor example binary")
    p.add_argument("--low", type=int, default=20)
    p.add_argument("--high", type=int, default=120)
    p.add_argument("--out", required=True)
    p.add_argument("--calls", default="PPPPP,UPUP,UP,UGP", help="comma-separated CALLS sequences")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    result = {"rounds": [args.low, args.high], "per_round": {}}
    for calls in args.calls.split(","):
        low = count(args.floor, args.low, args.out, calls)
        high = count(args.floor, args.high, args.out, calls)
        per_round = (high - low) / (args.high - args.low)
        print(f"  sdk floor {calls:<6} {per_round / 1e6:.3f} M instructions per round", file=sys.stderr)
        result["per_round"][calls] = per_round
    # The name earlier runs' floor.json used, for comparing across commits.
    result["per_five_put_items"] = result["per_round"].get("PPPPP")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
