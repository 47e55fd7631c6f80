#!/usr/bin/env python3
"""A `perf` profile of payhook delivering one class of webhook (native, kernel included), for
docs/performance.md: `perf record --call-graph dwarf` attached to the server process while N
deliveries are sent, then the breakdown by component (innermost frame that names one), the top
self frames, and folded stacks (`perf.folded`, flame-graph input: `inferno-flamegraph` or
`flamegraph.pl` draw it).

  python3 benches/profile.py --payhook target/profiling/payhook --target payhook-serve --class new --n 400 --out target/bench/perf

Use a binary with symbols (`cargo build --profile profiling`).
"""
import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu  # noqa: E402

# Component of a sample: the first of these (most specific first) that any frame of its stack
# names; so "SDK orchestrator" is the SDK's own machinery once signing, endpoint resolution,
# (de)serialisation and its HTTP client are counted apart. Kernel and allocation go by the leaf.
COMPONENTS = [
    ("sigv4 signing (incl. SHA-256/HMAC)", r"aws_sigv4|sha2::|hmac::"),
    ("SDK endpoint resolution", r"endpoint_lib|ResolveEndpoint|resolve_endpoint"),
    ("SDK (de)serialisers, DynamoDB types", r"aws_sdk_dynamodb::protocol_serde|aws_smithy_json|aws_sdk_dynamodb::operation::.*(de)?ser"),
    ("SDK HTTP client (hyper-util client, h1 client side)", r"aws_smithy_http_client|hyper_util::client|hyper::client|Http1Transaction>::parse.*Client|role::Client"),
    ("SDK orchestrator, interceptors, runtime plugins, config bag", r"aws_smithy_runtime|aws_runtime|aws_smithy_types|aws_types|aws_sdk_dynamodb|aws_smithy_observability"),
    ("payhook store/pipeline outside SDK calls", r"payhook::(store|pipeline|ledger|idempotency|eventlog)"),
    ("tracing / logging (subscriber, spans, events; not the Instrumented wrapper)", r"tracing_subscriber|tracing_core|tracing::span|EnvFilter"),
    ("payhook handler (verify, parse, answer, EMF)", r"payhook::(providers|metrics|domain|http)"),
    ("Lambda runtime client, API Gateway event (de)serialisation", r"lambda_runtime|lambda_http|aws_lambda_events"),
    ("axum/hyper server, http", r"hyper|^http::|httparse|axum|tower|matchit"),
    ("serde_json (outside the SDK)", r"serde"),
    ("tokio scheduler, I/O driver", r"tokio|mio::"),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--payhook", required=True)
    p.add_argument("--target", default="payhook-serve")
    p.add_argument("--class", dest="cls", default="new", choices=cpu.CLASSES)
    p.add_argument("--n", type=int, default=400)
    p.add_argument("--freq", type=int, default=4999)
    p.add_argument("--out", required=True)
    p.add_argument("--reuse", action="store_true", help="analyse the perf.data of an earlier run again")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    data = os.path.join(a.out, f"{a.target}.{a.cls}.perf.data")
    key = cpu.secret_key()
    run = uuid.uuid4().hex[:8]
    opts = argparse.Namespace(payhook=a.payhook, python=sys.executable, stderr=subprocess.DEVNULL)
    t = cpu.Target(a.target, opts, dict(os.environ))
    if not a.reuse:
        record(a, t, data, key, run)
    analyse(a, data)


def record(a, t, data, key, run):
    t.start()
    try:
        news = [cpu.delivery(run, i, key) for i in range(a.n)]
        for i in range(20):
            cpu.expect(t, "new", *t.send(*cpu.delivery(run + "w", i, key)))
        if a.cls == "duplicate":
            for h, b in news:
                cpu.expect(t, "new", *t.send(h, b))
        batch = [cpu.delivery(run + "b", i, key, bad=True) for i in range(a.n)] if a.cls == "bad_signature" else news
        rec = subprocess.Popen(["perf", "record", "-F", str(a.freq), "--call-graph", "dwarf,32768", "-p", str(t.proc.pid), "-o", data],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        for h, b in batch:
            cpu.expect(t, a.cls, *t.send(h, b))
        rec.send_signal(signal.SIGINT)
        rec.wait(60)
    finally:
        t.stop()


def analyse(a, data):
    script = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso", "--no-inline"], capture_output=True, text=True).stdout
    stacks = collections.Counter()
    stack = []
    for line in script.splitlines() + [""]:
        line = line.strip()
        if not line:
            if stack:
                stacks[";".join(reversed(stack))] += 1
            stack = []
            continue
        parts = line.split(None, 1)
        sym = parts[1] if len(parts) > 1 else "?"
        sym = re.sub(r"\+0x[0-9a-f]+", "", sym)
        sym = re.sub(r" \((.*)\)$", lambda m: f" [{os.path.basename(m.group(1))}]", sym)
        stack.append(sym)
    total = sum(stacks.values()) or 1
    with open(os.path.join(a.out, f"{a.target}.{a.cls}.perf.folded"), "w") as f:
        for s, c in stacks.most_common():
            f.write(f"{s} {c}\n")
    comp, selfs = collections.Counter(), collections.Counter()
    for s, c in stacks.items():
        frames = s.split(";")
        leaf = frames[-1]
        selfs[leaf] += c
        if "[kernel.kallsyms]" in leaf or "[unknown]" in leaf and "kernel" in s:
            comp["kernel (syscalls, network stack, scheduling)"] += c
            continue
        if re.search(r"mi_|malloc|free|realloc|__rust_alloc|__rust_dealloc|_int_", leaf):
            comp["allocation (malloc/free)"] += c
            continue
        syms = [re.sub(r" \[[^\]]*\]$", "", fr) for fr in frames]
        for name, pat in COMPONENTS:
            if any(re.search(pat, fr) for fr in syms):
                comp[name] += c
                break
        else:
            comp["other (libc, std)"] += c
    print(f"{a.target} {a.cls}: {total} samples at {a.freq} Hz over {a.n} deliveries")
    print("by component (most specific component any frame names; kernel and allocation by the leaf):")
    for name, c in comp.most_common():
        print(f"  {c / total * 100:5.1f}%  {name}")
    print("top self frames:")
    for name, c in selfs.most_common(25):
        print(f"  {c / total * 100:5.1f}%  {name[:140]}")


if __name__ == "__main__":
    main()
