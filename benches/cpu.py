#!/usr/bin/env python3
"""Whole-process CPU per delivery, and init, of payhook and of the Python reference, side by side.

What it measures, per target, in one long-running server process each:
  CPU per delivery   utime+stime of the server process (/proc/PID/stat, every thread, dead ones
                     too) over N sequential deliveries of one class, divided by N:
                       new            a new money movement (5 DynamoDB writes)
                       duplicate      the same events again, byte for byte (replayed)
                       bad_signature  a wrong signature (401; no DynamoDB)
  init               a fresh process per run, median of --init-runs:
                       ready_ms     process start -> port accepts (serve) / first GET .../next (Lambda)
                       first_ms     process start -> first delivery answered (a new one)
                       ready_cpu_ms CPU of the process when ready (/proc/PID/task/*/schedstat)

Targets:
  payhook-serve    `payhook serve` (axum over TCP)
  payhook-lambda   the same binary under an emulated Lambda Runtime API (this script serves it
                   on loopback: GET /2018-06-01/runtime/invocation/next hands out API Gateway v2
                   events, POST .../response takes the answer), as `provided.al2023` runs it
  pyref-serve      benches/pyref/serve.py: the Python reference behind http.server
  pyref-lambda     benches/pyref/handler.py under awslambdaric (the Python runtime's own client)
                   and the same emulated Runtime API

Everything talks to one DynamoDB endpoint (AWS_ENDPOINT_URL_DYNAMODB: scripts/bench starts
dynalite), payhook to its PAYHOOK_*_TABLE tables (which must exist), the reference to its own
tables, created here. The client (this process), the emulator (this process) and dynalite are
not counted. Prints JSON on stdout; progress on stderr. Run by scripts/bench; `--check` is the
quick self-test of tests/it/bench_scripts.rs (few deliveries, answers checked, no figures).
"""
import argparse
import base64
import hashlib
import hmac
import http.client
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
CLK_TCK = os.sysconf("SC_CLK_TCK")
CLASSES = ("new", "duplicate", "bad_signature")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_s(pid):
    """utime + stime of the whole process, in seconds (every thread, exited ones included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def sched_cpu_ms(pid):
    """Nanosecond on-CPU time summed over the live threads (precise; for the short init)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e6


# --- deliveries: Standard Webhooks, as `payhook-tools bench` sends them -------------------------------

def secret_key():
    s = os.environ["PAYHOOK_GENERIC_SECRETS"].split()[0]
    return base64.b64decode(s.split("_", 1)[1])


def delivery(run, n, key, bad=False, refund=None, full=False, reverse=False, word_of=None):
    """A signed Standard Webhooks delivery of the n-th payment of `run`, or with `refund=j` its
    j-th refund of one minor unit (a partial refund: the payment stays refundable), or with
    `full=True` as well a refund of the whole payment; `reverse=True` makes it that refund's
    `refund.failed` (its reversal). `word_of=payout id`: a `transfer.failed` about that payout
    (100 NGN, as benches/instructions.py's seeded payouts are), its money credited back."""
    eid = f"evt_{run}_{n}" + ("" if refund is None else f"_r{refund}") + ("_v" if reverse else "")
    eid += "" if word_of is None else "_w"
    ts = str(int(time.time()))
    payment = f"cpu_{run}_{n}"
    if word_of is not None:
        event = {"type": "transfer.failed", "data": {"reference": word_of, "amount": 100, "currency": "NGN"}}
    elif refund is None:
        event = {"type": "payment.succeeded",
                 "data": {"reference": payment, "account": f"cpu_{n % 64}", "amount": 1000 + n, "currency": "NGN"}}
    else:
        event = {"type": "refund.failed" if reverse else "refund.succeeded",
                 "data": {"reference": f"{payment}_r{refund}", "payment_reference": payment,
                          "amount": 1000 + n if full else 1, "currency": "NGN"}}
    body = json.dumps({"id": eid, "type": event["type"], "created": int(time.time()), "data": event["data"]},
                      separators=(",", ":")).encode()
    sig = base64.b64encode(hmac.new(key, f"{eid}.{ts}.".encode() + body, hashlib.sha256).digest()).decode()
    if bad:
        sig = ("A" if sig[0] != "A" else "B") + sig[1:]
    headers = {"content-type": "application/json", "webhook-id": eid, "webhook-timestamp": ts,
               "webhook-signature": f"v1,{sig}"}
    return headers, body


def apigw_event(headers, body, request_id):
    return {
        "version": "2.0", "routeKey": "POST /webhooks/{provider}", "rawPath": "/webhooks/generic",
        "rawQueryString": "", "headers": {**headers, "host": "bench.execute-api.local"},
        "requestContext": {
            "accountId": "123456789012", "apiId": "bench", "domainName": "bench.execute-api.local",
            "domainPrefix": "bench", "requestId": request_id, "routeKey": "POST /webhooks/{provider}",
            "stage": "$default", "time": "03/Dec/2026:00:00:00 +0000", "timeEpoch": int(time.time() * 1000),
            "http": {"method": "POST", "path": "/webhooks/generic", "protocol": "HTTP/1.1",
                     "sourceIp": "127.0.0.1", "userAgent": "payhook-cpu-bench"},
        },
        "pathParameters": {"provider": "generic"},
        "body": base64.b64encode(body).decode(), "isBase64Encoded": True,
    }


# --- the emulated Lambda Runtime API ------------------------------------------------------------

class RuntimeApi:
    """Serves the Runtime API on loopback; `invoke` hands one event to the function and waits."""

    def __init__(self):
        self.pending = queue.Queue()
        self.results = {}
        self.first_next = None  # (time, cpu ms) at the function's first GET .../next
        self.pid = None
        self.errors = []
        api = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def log_message(self, *a):
                pass

            def reply(self, status, body=b"{}", headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path != "/2018-06-01/runtime/invocation/next":
                    return self.reply(404)
                if api.first_next is None:
                    t = time.perf_counter()
                    while api.pid is None:  # Popen has not returned yet in the other thread
                        time.sleep(0.0001)
                    api.first_next = (t, sched_cpu_ms(api.pid))
                request_id, event = api.pending.get()
                deadline = int(time.time() * 1000) + 30_000
                self.reply(200, json.dumps(event).encode(), [
                    ("lambda-runtime-aws-request-id", request_id),
                    ("lambda-runtime-deadline-ms", str(deadline)),
                    ("lambda-runtime-invoked-function-arn", "arn:aws:lambda:us-east-1:123456789012:function:bench"),
                    ("lambda-runtime-trace-id", "Root=1-00000000-000000000000000000000000;Sampled=0"),
                ])

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                parts = self.path.split("/")
                # /2018-06-01/runtime/invocation/{id}/response|error, /2018-06-01/runtime/init/error
                if len(parts) == 6 and parts[3] == "invocation":
                    slot = api.results.get(parts[4])
                    if slot is not None:
                        slot[1] = (parts[5], body)
                        slot[0].set()
                    return self.reply(202)
                api.errors.append((self.path, body))
                self.reply(202)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # the function's connection reset when it is stopped

        self.server = Server(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def invoke(self, event, timeout_s=30):
        request_id = str(uuid.uuid4())
        slot = [threading.Event(), None]
        self.results[request_id] = slot
        self.pending.put((request_id, event))
        if not slot[0].wait(timeout_s):
            raise RuntimeError(f"no answer from the function in {timeout_s} s (runtime errors: {self.errors[-1:]})")
        del self.results[request_id]
        kind, body = slot[1]
        if kind != "response":
            raise RuntimeError(f"function error: {body[:300]!r}")
        return json.loads(body)

    def close(self):
        self.server.shutdown()


# --- targets ------------------------------------------------------------------------------------

class Target:
    def __init__(self, name, args, env):
        self.name, self.args, self.env = name, args, env
        self.proc = None
        self.lambda_path = name.endswith("-lambda")

    def command(self, port_or_api):
        if self.name == "payhook-serve":
            # --metrics emf: one EMF line per delivery as in Lambda (and as pyref writes), so
            # the serve figures keep counting that work (`payhook serve` is quiet by default).
            return [self.args.payhook, "serve", "--addr", f"127.0.0.1:{port_or_api}", "--metrics", "emf"], None
        if self.name == "payhook-lambda":
            return [self.args.payhook], None
        if self.name == "pyref-serve":
            return [self.args.python, os.path.join(HERE, "pyref", "serve.py"), str(port_or_api)], os.path.join(HERE, "pyref")
        return [self.args.python, "-m", "awslambdaric", "handler.lambda_handler"], os.path.join(HERE, "pyref")

    def start(self):
        """Starts the process; returns (ready_ms, ready_cpu_ms)."""
        env = dict(self.env)
        if self.lambda_path:
            self.api = RuntimeApi()
            env.update({
                "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self.api.port}", "AWS_LAMBDA_FUNCTION_NAME": "bench",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256", "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/bench", "AWS_LAMBDA_LOG_STREAM_NAME": "bench",
                "AWS_LAMBDA_LOG_FORMAT": "JSON", "_HANDLER": "handler.lambda_handler", "LAMBDA_TASK_ROOT": os.path.join(HERE, "pyref"),
            })
            cmd, cwd = self.command(self.api.port)
        else:
            self.port = free_port()
            cmd, cwd = self.command(self.port)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=self.args.stderr)
        if self.lambda_path:
            self.api.pid = self.proc.pid
        while True:
            if self.lambda_path:
                if self.api.first_next is not None:
                    t, cpu = self.api.first_next
                    return (t - t0) * 1000, cpu
            else:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return (time.perf_counter() - t0) * 1000, sched_cpu_ms(self.proc.pid)
                except OSError:
                    pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before it was ready")
            ready_s = getattr(self, "ready_s", 20)  # instructions.py waits longer: callgrind
            if time.perf_counter() - t0 > ready_s:
                raise RuntimeError(f"{self.name} not ready after {ready_s} s")
            time.sleep(0.0002)

    def send(self, headers, body):
        """One delivery; returns (status, answer body as parsed JSON)."""
        if self.lambda_path:
            out = self.api.invoke(apigw_event(headers, body, str(uuid.uuid4())))
            raw = out.get("body") or ""
            if out.get("isBase64Encoded"):
                raw = base64.b64decode(raw).decode()
            return out.get("statusCode"), json.loads(raw) if raw else None
        if getattr(self, "conn", None) is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.conn.request("POST", "/webhooks/generic", body=body, headers=headers)
        res = self.conn.getresponse()
        data = res.read()
        return res.status, json.loads(data) if data else None

    def stop(self):
        if getattr(self, "conn", None) is not None:
            self.conn.close()
            self.conn = None
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.lambda_path:
            self.api.close()


def expect(target, cls, status, answer):
    want = 401 if cls == "bad_signature" else 200
    if status != want or (want == 200 and (answer or {}).get("status") != "applied"):
        raise RuntimeError(f"{target.name} {cls}: got {status} {answer!r}, expected {want}")


def measure(target, n, run, key, warmup):
    """One process: warm-up, then each class; CPU ms per delivery by class."""
    target.start()
    try:
        for i in range(warmup):
            expect(target, "new", *target.send(*delivery(run + "w", i, key)))
        news = [delivery(run, i, key) for i in range(n)]
        batches = {"new": news, "duplicate": news,
                   "bad_signature": [delivery(run + "b", i, key, bad=True) for i in range(n)]}
        per = {}
        for cls in CLASSES:
            c0, w0 = cpu_s(target.proc.pid), time.perf_counter()
            for h, b in batches[cls]:
                expect(target, cls, *target.send(h, b))
            c1, w1 = cpu_s(target.proc.pid), time.perf_counter()
            per[cls] = {"cpu_ms": (c1 - c0) * 1000 / n, "wall_ms": (w1 - w0) * 1000 / n}
            log(f"  {target.name:<15} {cls:<14} {per[cls]['cpu_ms']:.3f} ms CPU, {per[cls]['wall_ms']:.2f} ms wall per delivery")
        return per
    finally:
        target.stop()


def measure_init(target, runs, run, key):
    ready, ready_cpu, first = [], [], []
    for i in range(runs):
        t0 = time.perf_counter()
        r_ms, r_cpu = target.start()
        try:
            expect(target, "new", *target.send(*delivery(run + "i", i, key)))
            first.append((time.perf_counter() - t0) * 1000)
            ready.append(r_ms)
            ready_cpu.append(r_cpu)
        finally:
            target.stop()
    return {"ready_ms": statistics.median(ready), "ready_ms_min": min(ready), "ready_ms_max": max(ready),
            "ready_cpu_ms": statistics.median(ready_cpu), "first_ms": statistics.median(first), "runs": runs}


def measure_ready(target, runs):
    """Init only (no delivery): start -> ready, and CPU until ready."""
    ready, ready_cpu = [], []
    for _ in range(runs):
        r_ms, r_cpu = target.start()
        target.stop()
        ready.append(r_ms)
        ready_cpu.append(r_cpu)
    return {"ready_ms": statistics.median(ready), "ready_ms_min": min(ready), "ready_ms_max": max(ready),
            "ready_cpu_ms": statistics.median(ready_cpu), "runs": runs}


def https_env(env):
    """The environment of a function on AWS, as far as init goes: the default (https) DynamoDB
    endpoint, and the system's root certificates as one bundle file, as Lambda's
    provided.al2023 and python3.x images have them (this machine's SSL_CERT_DIR, one file per
    root, would be slower to read and not what Lambda does)."""
    env = dict(env)
    env.pop("AWS_ENDPOINT_URL_DYNAMODB", None)
    env.pop("AWS_ENDPOINT_URL", None)
    env.pop("SSL_CERT_DIR", None)
    for bundle in ("/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/certs/ca-certificates.crt"):
        if os.path.exists(bundle):
            env["SSL_CERT_FILE"] = bundle
            break
    return env


class BlackHole:
    """A DynamoDB endpoint that accepts connections and never answers: what a process meets
    when DynamoDB is unreachable at start (a stalled network path). Init must not wait on it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


def create_pyref_tables(prefix):
    import boto3  # the reference's own dependency (target/bench/pyref-venv)
    ddb = boto3.client("dynamodb")
    specs = {"idempotency": [("id", "HASH")], "payments": [("pk", "HASH")],
             "ledger": [("pk", "HASH"), ("sk", "RANGE")], "events": [("pk", "HASH"), ("sk", "RANGE")]}
    names = {}
    for table, keys in specs.items():
        name = f"{prefix}-{table}"
        ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": a, "KeyType": t} for a, t in keys],
                         AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a, _ in keys])
        names[table] = name
    for name in names.values():
        ddb.get_waiter("table_exists").wait(TableName=name)
    return names


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--payhook", required=True, help="the payhook binary")
    p.add_argument("--python", default=sys.executable, help="python with benches/pyref/requirements.txt")
    p.add_argument("--targets", default="payhook-serve,payhook-lambda,pyref-serve,pyref-lambda")
    p.add_argument("--n", type=int, default=1000, help="deliveries per class")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--init-runs", type=int, default=11)
    p.add_argument("--check", action="store_true", help="quick self-test: 3 deliveries per class, 1 init run")
    p.add_argument("--server-logs", help="append the servers' stderr here (default: discarded)")
    p.add_argument("--secrets-endpoint", help="a Secrets Manager endpoint (moto) holding --secret-id: also time "
                   "payhook's init when it reads its signing secret from there (init_secrets)")
    p.add_argument("--secret-id", default="payhook/bench")
    args = p.parse_args()
    if args.check:
        args.n, args.warmup, args.init_runs = 3, 1, 1
    args.stderr = open(args.server_logs, "ab") if args.server_logs else subprocess.DEVNULL
    targets = [t for t in args.targets.split(",") if t]
    # botocore reads AWS_DEFAULT_REGION (Lambda sets both).
    os.environ.setdefault("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1"))
    key = secret_key()
    env = dict(os.environ)
    env.setdefault("RUST_LOG", "info")
    if any(t.startswith("pyref") for t in targets):
        prefix = f"pyref-{int(time.time())}-{os.getpid()}"
        names = create_pyref_tables(prefix)
        env.update({f"PYREF_{k.upper()}_TABLE": v for k, v in names.items()})
        env.setdefault("POWERTOOLS_SERVICE_NAME", "pyref")
    run = uuid.uuid4().hex[:8]
    out = {"n": args.n, "init_runs": args.init_runs, "targets": {}}
    for name in targets:
        t = Target(name, args, env)
        log(f"==> {name}: init x{args.init_runs}")
        init = measure_init(t, args.init_runs, f"{run}{name}", key)
        log(f"  {name:<15} ready {init['ready_ms']:.2f} ms (CPU {init['ready_cpu_ms']:.2f} ms), first answer {init['first_ms']:.2f} ms")
        log(f"==> {name}: {args.n} deliveries per class")
        per = measure(t, args.n, f"{run}{name}", key, args.warmup)
        out["targets"][name] = {"init": init, "per_delivery": per}
        if name.endswith("-lambda"):
            # On AWS the endpoint is https: the TLS set-up (root certificates) is part of init.
            https = measure_ready(Target(name, args, https_env(env)), args.init_runs)
            log(f"  {name:<15} https endpoint: ready {https['ready_ms']:.2f} ms (CPU {https['ready_cpu_ms']:.2f} ms)")
            out["targets"][name]["init_https"] = https
        if name.startswith("payhook"):
            hole = BlackHole()
            try:
                uenv = dict(env, AWS_ENDPOINT_URL_DYNAMODB=f"http://127.0.0.1:{hole.port}")
                down = measure_ready(Target(name, args, uenv), args.init_runs)
            finally:
                hole.close()
            log(f"  {name:<15} DynamoDB unreachable: ready {down['ready_ms']:.2f} ms (CPU {down['ready_cpu_ms']:.2f} ms)")
            out["targets"][name]["init_unreachable"] = down
        if name.startswith("payhook") and args.secrets_endpoint:
            # The signing secret from Secrets Manager instead of the environment: every rotation
            # stage is asked for (three GetSecretValue calls) before the first request.
            senv = dict(env)
            senv.pop("PAYHOOK_GENERIC_SECRETS", None)
            senv.update({"PAYHOOK_GENERIC_SECRETS_ARN": args.secret_id,
                         "AWS_ENDPOINT_URL_SECRETS_MANAGER": args.secrets_endpoint})
            sm = measure_ready(Target(name, args, senv), args.init_runs)
            log(f"  {name:<15} secrets from Secrets Manager: ready {sm['ready_ms']:.2f} ms (CPU {sm['ready_cpu_ms']:.2f} ms)")
            out["targets"][name]["init_secrets"] = sm
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
