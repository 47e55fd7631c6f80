#!/usr/bin/env python3
"""Where a callgrind dump's instructions go: self cost grouped by crate/library (the breakdown in
docs/performance.md), the top functions by self cost, and the inclusive cost of a few SDK entry
points. Reads dumps written with --compress-strings=no (benches/instructions.py does).

  python3 benches/cg_breakdown.py DUMP [--per N] [--top 25]
"""
import argparse
import collections
import re

GROUPS = [  # first match wins; on the demangled, crate-qualified function name
    ("sigv4 signing", r"aws_sigv4|sha2::|hmac::|<sha2|ring::digest|aws_lc"),
    ("SDK endpoint resolution", r"endpoint_lib|endpoint::|resolve_endpoint|idna|url::"),
    ("SDK orchestrator, interceptors, config bag", r"aws_smithy_runtime(_api)?::|aws_runtime::|aws_smithy_types::config_bag|aws_smithy_types::type_erasure|aws_types::"),
    ("SDK (de)serialisers, DynamoDB types", r"aws_sdk_dynamodb|aws_smithy_json|aws_smithy_types"),
    ("other aws-smithy", r"aws_smithy|aws_credential|aws_config"),
    ("hyper, http, h1 (server and client)", r"hyper|^http::|<http::|httparse|h2::|tower|axum|matchit"),
    ("tokio", r"tokio|mio::|parking_lot"),
    ("serde / serde_json (payhook's own JSON)", r"serde"),
    ("tracing / logging", r"tracing|fmt::|core::fmt|alloc::fmt"),
    ("payhook", r"payhook"),
    ("allocation (malloc/free/realloc)", r"malloc|free|realloc|_int_|mi_|alloc::alloc|__rdl|__rust_alloc|__rust_dealloc|mimalloc|tcache|arena"),
    ("memcpy/memmove/memset/strlen (libc)", r"mem(cpy|move|set|cmp)|str(len|cmp)|__memcpy|__memset"),
    ("libc syscall wrappers, pthread", r"libc|pthread|__GI|epoll|writev|recv|send|read|write|futex|clock_gettime|syscall"),
]


def parse(path):
    self_cost = collections.Counter()
    incl_calls = collections.Counter()
    fn = None
    after_calls = False
    total = 0
    with open(path) as f:
        for line in f:
            if line.startswith("fn="):
                fn = line[3:].strip()
                continue
            if line.startswith("calls="):
                after_calls = True
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if len(parts) >= 2 and fn is not None:
                    cost = int(parts[1])
                    if after_calls:
                        incl_calls[fn] += cost
                    else:
                        self_cost[fn] += cost
                        total += cost
                after_calls = False
                continue
            if line.startswith(("summary:", "totals:")):
                continue
    incl = {k: self_cost.get(k, 0) + incl_calls.get(k, 0) for k in set(self_cost) | set(incl_calls)}
    return self_cost, incl, total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dump")
    p.add_argument("--per", type=float, default=1.0, help="divide by this (deliveries in the dump)")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    self_cost, incl, total = parse(a.dump)
    groups = collections.Counter()
    for name, cost in self_cost.items():
        for g, pat in GROUPS:
            if re.search(pat, name):
                groups[g] += cost
                break
        else:
            groups["other"] += cost
    print(f"total {total / a.per / 1e6:.3f} M instructions per delivery")
    print("\nself cost by group:")
    for g, c in groups.most_common():
        print(f"  {c / total * 100:5.1f}%  {c / a.per / 1e3:8.0f} k  {g}")
    print(f"\ntop {a.top} functions by self cost:")
    for name, c in self_cost.most_common(a.top):
        print(f"  {c / total * 100:5.1f}%  {name[:150]}")
    print("\ninclusive cost of entry points:")
    for label, pat in [("sigv4 sign", r"aws_sigv4::http_request::sign::sign$|aws_sigv4::http_request::sign::sign<"),
                       ("SigV4 signer (smithy)", r"SigV4Signer as .*Sign>::sign_http_request"),
                       ("endpoint resolution", r"DefaultResolver as .*ResolveEndpoint>::resolve_endpoint$"),
                       ("orchestrator invoke", r"aws_smithy_runtime::client::orchestrator::invoke_with_stop_point"),
                       ("emf line", r"payhook::metrics::emit"),
                       ("tracing event", r"tracing_subscriber::fmt::fmt_layer::Layer.*on_event")]:
        hits = [(incl[k], k) for k in incl if re.search(pat, k)]
        if hits:
            c, k = max(hits)
            print(f"  {c / total * 100:5.1f}%  {c / a.per / 1e3:8.0f} k  {label}: {k[:110]}")


if __name__ == "__main__":
    main()
