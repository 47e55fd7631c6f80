#!/usr/bin/env python3
"""Instructions per delivery of payhook (serve and Lambda path), counted by callgrind: stable on a
noisy shared machine where CPU time is not, so each lever of docs/performance.md is measured
with it.

The target process (from benches/cpu.py) runs under `valgrind --tool=callgrind`; after a
warm-up, for each class (new, duplicate, bad_signature; new_refund, duplicate_refund,
new_reversal, duplicate_reversal, new_word and duplicate_word for payhook) the counters are
zeroed, N deliveries sent, and the counters dumped (`callgrind_control`). A running callgrind
acts on a request when the program next runs code, so the zero takes effect as the class's first
delivery arrives and the dump as one extra delivery of the same class arrives: each dump holds N
deliveries. Prints
JSON: instructions per delivery by target and class, and the dump files' paths
(`callgrind_annotate FILE` reads them).

  python3 benches/instructions.py --payhook target/profiling/payhook --n 200 --out target/bench/cg
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu  # noqa: E402


def control(flag, pid):
    return subprocess.Popen(["callgrind_control", flag, str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def totals(path):
    with open(path) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def refunded_duplicates(target, pid, prefix, run, key, args):
    """`duplicate_refunded`: the duplicate of a credit whose payment has had `args.refunds`
    partial refunds since (its history and refund keys grown), so the figure shows whether a
    replay's cost grows with the payment's life. `args.refunded` payments, counted alike."""
    m = args.refunded
    news = [cpu.delivery(run, i, key) for i in range(m + 1)]
    for i, (h, b) in enumerate(news):
        cpu.expect(target, "new", *target.send(h, b))
        for j in range(args.refunds):
            cpu.expect(target, "new", *target.send(*cpu.delivery(run, i, key, refund=j)))
    z = control("-z", pid)
    for h, b in news[:m]:
        cpu.expect(target, "duplicate", *target.send(h, b))
    z.wait(60)
    before = set(glob.glob(f"{prefix}.{pid}*"))
    d = control("-d", pid)
    time.sleep(0.2)
    cpu.expect(target, "duplicate", *target.send(*news[m]))
    d.wait(60)
    new_files = sorted(set(glob.glob(f"{prefix}.{pid}*")) - before)
    if not new_files:
        raise RuntimeError("callgrind wrote no dump for the refunded duplicates")
    return {"instructions": totals(new_files[-1]) / m, "dump": new_files[-1], "refunds": args.refunds}


def measured(target, pid, prefix, cls, batch, n):
    """Instructions per delivery of `batch[:n]` (the counters zeroed as its first arrives, dumped
    as `batch[n]` arrives), each answered as `cls` expects."""
    z = control("-z", pid)
    for h, b in batch[:n]:
        cpu.expect(target, cls, *target.send(h, b))
    z.wait(60)
    before = set(glob.glob(f"{prefix}.{pid}*"))
    d = control("-d", pid)
    time.sleep(0.2)
    cpu.expect(target, cls, *target.send(*batch[n]))
    d.wait(60)
    new_files = sorted(set(glob.glob(f"{prefix}.{pid}*")) - before)
    if not new_files:
        raise RuntimeError(f"callgrind wrote no dump for {cls}")
    return {"instructions": totals(new_files[-1]) / n, "dump": new_files[-1]}


def refunds(target, pid, prefix, run, key, n):
    """`new_refund` and `duplicate_refund`: a full refund of each of n + 1 payments credited just
    before (#44: its claim on its payment, four calls), then each refund again; `new_reversal`
    and `duplicate_reversal`: each refund's `refund.failed`, its debit given back (its claim on
    the payment too), then each again."""
    for i in range(n + 1):
        cpu.expect(target, "new", *target.send(*cpu.delivery(run, i, key)))
    batch = [cpu.delivery(run, i, key, refund=0, full=True) for i in range(n + 1)]
    got = {"new_refund": measured(target, pid, prefix, "new", batch, n),
           "duplicate_refund": measured(target, pid, prefix, "duplicate", batch, n)}
    batch = [cpu.delivery(run, i, key, refund=0, full=True, reverse=True) for i in range(n + 1)]
    got["new_reversal"] = measured(target, pid, prefix, "new", batch, n)
    got["duplicate_reversal"] = measured(target, pid, prefix, "duplicate", batch, n)
    return got


def seed_payouts(ids):
    """Payouts sent and not yet settled, one item each in payhook's payments table, as
    `payhook_tools::capacity::sent_payout` writes them (100 NGN, generic provider)."""
    import boto3  # requirements-dev.txt (moto's dependency)
    ddb = boto3.client("dynamodb", endpoint_url=os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"),
                       region_name=os.environ.get("AWS_REGION", "us-east-1"))
    now = str(int(time.time() * 1000))
    for i, pid in enumerate(ids):
        ddb.put_item(TableName=os.environ["PAYHOOK_PAYMENTS_TABLE"], Item={
            "pk": {"S": f"payout#{pid}"}, "payout": {"S": pid}, "payout_status": {"S": "sent"},
            "provider": {"S": "generic"}, "account": {"S": f"cpu_p{i % 64}"},
            "amount_minor": {"N": "100"}, "currency": {"S": "NGN"},
            "destination": {"S": '{"bank":"058","account_number":"0123456789"}'},
            "shard": {"N": "0"}, "reserve_at_ms": {"N": now}, "sends": {"N": "1"},
            "open": {"S": "PAYOUT#0"}, "created_at_ms": {"N": now}, "updated_at_ms": {"N": now}})


def payout_words(target, pid, prefix, run, n):
    """`new_word` and `duplicate_word`: a payout's `transfer.failed` (#44, part 4: its claim on
    the payout; a read and four writes, the money credited back), then each again (a read and
    the log), over n + 1 payouts seeded sent."""
    key = cpu.secret_key()
    ids = [f"po_{uuid.uuid4().hex}" for _ in range(n + 1)]
    seed_payouts(ids)
    batch = [cpu.delivery(run, i, key, word_of=ids[i]) for i in range(n + 1)]
    return {"new_word": measured(target, pid, prefix, "new", batch, n),
            "duplicate_word": measured(target, pid, prefix, "duplicate", batch, n)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--payhook", required=True)
    p.add_argument("--targets", default="payhook-serve,payhook-lambda",
                   help="of benches/cpu.py's targets; pyref-serve is the Python reference (needs --python)")
    p.add_argument("--python", default=sys.executable, help="a Python with benches/pyref/requirements.txt")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--out", required=True, help="folder for the callgrind dumps")
    p.add_argument("--label", default="")
    p.add_argument("--refunds", type=int, default=0,
                   help="also measure duplicates of payments with this many refunds each (class duplicate_refunded)")
    p.add_argument("--refunded", type=int, default=20, help="how many such payments (the class's N)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    key = cpu.secret_key()
    run = uuid.uuid4().hex[:8]
    result = {"n": args.n, "label": args.label, "targets": {}}
    env = dict(os.environ)
    if "pyref" in args.targets:  # the Python reference's own tables, as benches/cpu.py makes them
        os.environ.setdefault("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1"))
        env = dict(os.environ, POWERTOOLS_SERVICE_NAME="pyref")
        names = cpu.create_pyref_tables(f"pyref-cg-{int(time.time())}-{os.getpid()}")
        env.update({f"PYREF_{k.upper()}_TABLE": v for k, v in names.items()})
    for name in args.targets.split(","):
        prefix = os.path.join(os.path.abspath(args.out), f"{args.label or 'run'}.{name}")
        for old in glob.glob(prefix + ".*"):
            os.remove(old)
        opts = argparse.Namespace(payhook=args.payhook, python=args.python, stderr=subprocess.DEVNULL)
        target = cpu.Target(name, opts, env)
        base = target.command

        def under_callgrind(port_or_api, base=base, prefix=prefix):
            cmd, cwd = base(port_or_api)
            return ["valgrind", "--tool=callgrind", "--dump-instr=no", "--compress-strings=no", "--compress-pos=no", f"--callgrind-out-file={prefix}.%p"] + cmd, cwd

        target.command = under_callgrind
        target.ready_s = 600  # Python's imports (boto3, Powertools) take minutes under callgrind
        target.start()
        try:
            pid = target.proc.pid
            for i in range(args.warmup):
                cpu.expect(target, "new", *target.send(*cpu.delivery(run + name + "w", i, key)))
            news = [cpu.delivery(run + name, i, key) for i in range(args.n + 1)]
            bads = [cpu.delivery(run + name + "b", i, key, bad=True) for i in range(args.n + 1)]
            batches = {"new": news, "duplicate": news[: args.n] + [news[args.n]], "bad_signature": bads}
            per = {}
            for cls in cpu.CLASSES:
                batch = batches[cls]
                if cls == "duplicate":
                    batch = news[: args.n + 1]  # all applied during "new"
                z = control("-z", pid)
                for h, b in batch[: args.n]:
                    cpu.expect(target, cls, *target.send(h, b))
                z.wait(60)
                before = set(glob.glob(f"{prefix}.{pid}*"))
                d = control("-d", pid)
                time.sleep(0.2)
                cpu.expect(target, cls, *target.send(*batch[args.n]))
                d.wait(60)
                new_files = sorted(set(glob.glob(f"{prefix}.{pid}*")) - before)
                if not new_files:
                    raise RuntimeError(f"callgrind wrote no dump for {name} {cls}")
                per[cls] = {"instructions": totals(new_files[-1]) / args.n, "dump": new_files[-1]}
                cpu.log(f"  {name:<15} {cls:<14} {per[cls]['instructions'] / 1e6:.3f} M instructions per delivery")
            if args.refunds and name.startswith("payhook"):  # the Python reference has no refunds
                per["duplicate_refunded"] = refunded_duplicates(target, pid, prefix, run + name + "r", key, args)
                cpu.log(f"  {name:<15} {'dup. refunded':<14} {per['duplicate_refunded']['instructions'] / 1e6:.3f} M instructions per delivery"
                        f" ({args.refunds} refunds on each payment)")
            if name.startswith("payhook"):  # the Python reference has no refunds
                per.update(refunds(target, pid, prefix, run + name + "f", key, args.n))
                per.update(payout_words(target, pid, prefix, run + name + "p", args.n))
                for cls in ("new_refund", "duplicate_refund", "new_reversal", "duplicate_reversal",
                            "new_word", "duplicate_word"):
                    cpu.log(f"  {name:<15} {cls:<14} {per[cls]['instructions'] / 1e6:.3f} M instructions per delivery")
            result["targets"][name] = per
        finally:
            target.stop()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
