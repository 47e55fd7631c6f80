#!/usr/bin/env python3
"""Instructions per request of dynamo-claim's HTTP example, new and replay, beside the same
service under Powertools-Python (benches/powertools_http.py), counted by callgrind in one run
against one dynalite: a count that holds on a noisy shared machine where CPU time does not.

Each target runs under `valgrind --tool=callgrind`; after a warm-up, for each class the counters
are zeroed, N requests sent on one keep-alive connection, and the counters dumped
(`callgrind_control`; the dump lands when the program next runs, on one extra request of the
same class). `new`: N fresh keys; `replay`: the same N keys and bodies again. Prints JSON and
a Markdown table.

  cargo build --release -p dynamo-claim --features http --example http
  python3 crates/claim/benches/http_instructions.py --example target/release/examples/http \\
      --python target/bench/pyref-venv/bin/python --n 100
"""
import argparse
import glob
import http.client
import json
import os
import socket
import subprocess
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def totals(path):
    with open(path) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


class Target:
    def __init__(self, name, cmd, env, out):
        self.name, self.cmd, self.env, self.out = name, cmd, env, out
        self.port = free_port()

    def start(self):
        prefix = os.path.join(self.out, f"{self.name}.cg")
        for old in glob.glob(prefix + ".*"):
            os.remove(old)
        self.prefix = prefix
        env = dict(self.env, ADDR=f"127.0.0.1:{self.port}")
        argv = ["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={prefix}.%p"]
        argv += [c.replace("{port}", str(self.port)) for c in self.cmd]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(1200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"{self.name} did not start")
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def post(self, key, body):
        self.conn.request("POST", "/charges", body=body,
                          headers={"idempotency-key": key, "content-type": "application/json"})
        res = self.conn.getresponse()
        data = res.read()
        if res.status not in (200, 201):
            raise RuntimeError(f"{self.name}: {res.status} {data[:200]!r}")
        return data

    def charges(self):
        self.conn.request("GET", "/charges")
        res = self.conn.getresponse()
        return json.loads(res.read())["charges"]

    def stop(self):
        self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def control(flag, pid):
    return subprocess.Popen(["callgrind_control", flag, str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(target, n, warmup):
    run = uuid.uuid4().hex[:8]
    body = lambda i: json.dumps({"amount_minor": 500 + i, "memo": f"order {i} of run {run}"})
    for i in range(warmup):
        target.post(f"{run}-w{i}", body(i))
    keys = [(f"{run}-{i}", body(i)) for i in range(n + 1)]
    per = {}
    for cls in ("new", "replay"):
        z = control("-z", target.proc.pid)
        z.wait(60)
        time.sleep(0.2)
        for k, b in keys[:n]:
            target.post(k, b)
        before = set(glob.glob(f"{target.prefix}.{target.proc.pid}*"))
        d = control("-d", target.proc.pid)
        time.sleep(0.2)
        target.post(*keys[n])
        d.wait(60)
        dumps = sorted(set(glob.glob(f"{target.prefix}.{target.proc.pid}*")) - before)
        if not dumps:
            raise RuntimeError(f"no callgrind dump for {target.name} {cls}")
        per[cls] = totals(dumps[-1]) / n
    charged = target.charges()
    if charged != warmup + n + 1:
        raise RuntimeError(f"{target.name} charged {charged}, not {warmup + n + 1}: a replay ran")
    return per


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--example", required=True, help="the built example (cargo build --release -p dynamo-claim --features http --example http)")
    p.add_argument("--python", required=True, help="a Python with requirements of benches/pyref")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--out", default="target/bench/claim-http")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ)
    run = uuid.uuid4().hex[:8]
    targets = [
        Target("dynamo-claim", [os.path.abspath(args.example)], dict(env, CLAIMS_TABLE=f"claim-http-{run}"), args.out),
        Target("powertools", [args.python, os.path.join(HERE, "powertools_http.py"), "{port}"],
               dict(env, CLAIMS_TABLE=f"pt-http-{run}", AWS_DEFAULT_REGION=env.get("AWS_REGION", "us-east-1")), args.out),
    ]
    result = {"n": args.n, "targets": {}}
    for t in targets:
        if t.name == "dynamo-claim":
            t.cmd = t.cmd + ["--create-table"]  # creates its table, then serves
        t.start()
        try:
            result["targets"][t.name] = measure(t, args.n, args.warmup)
        finally:
            t.stop()
    print(json.dumps(result, indent=1))
    r, pt = result["targets"]["dynamo-claim"], result["targets"]["powertools"]
    print("\n| request | dynamo-claim (HTTP example) | Powertools-Python | Powertools / dynamo-claim |")
    print("|---|---|---|---|")
    for cls in ("new", "replay"):
        print(f"| {cls} | {r[cls] / 1e6:.2f} M | {pt[cls] / 1e6:.2f} M | {pt[cls] / r[cls]:.1f}x |")


if __name__ == "__main__":
    main()
