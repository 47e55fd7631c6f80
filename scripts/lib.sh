# Shared by scripts/dev and scripts/test: install what the project needs, start dynalite.
# Everything a script starts is stopped by its EXIT trap.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '%s\n' "$*" >&2; }

ensure_node_deps() {
  if [ ! -x node_modules/.bin/dynalite ]; then
    log "==> npm ci (dynalite, pinned by package-lock.json)"
    npm ci --no-audit --no-fund >&2
  fi
}

ensure_python_deps() {
  if ! python3 -c 'import cfnlint, moto, flask' 2>/dev/null || ! command -v cargo-lambda >/dev/null 2>&1; then
    log "==> pip install -r requirements-dev.txt (cfn-lint, cargo-lambda, moto)"
    python3 -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt >&2
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_port() { # host port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  log "nothing listening on $1:$2 after $3 s"
  return 1
}

PIDS=()
stop_all() {
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
}
trap stop_all EXIT

# Starts dynalite unless AWS_ENDPOINT_URL_DYNAMODB already points somewhere (DynamoDB Local, AWS).
start_dynalite() {
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}"
  export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
  if [ -n "${AWS_ENDPOINT_URL_DYNAMODB:-}" ]; then
    log "==> using DynamoDB at $AWS_ENDPOINT_URL_DYNAMODB"
    return 0
  fi
  local port
  port="$(free_port)"
  node_modules/.bin/dynalite --host 127.0.0.1 --port "$port" --createTableMs 0 >/dev/null 2>&1 &
  PIDS+=("$!")
  wait_port 127.0.0.1 "$port" 20
  export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port"
  log "==> dynalite on $AWS_ENDPOINT_URL_DYNAMODB"
}

# The test build: `cargo test --workspace --all-targets`. scripts/dev builds only the payhook
# binary, and that is the same build of every crate below it, because crates/workspace-hack pins
# the features the tests' dev-dependencies would otherwise add (tests/it/layers.rs checks that
# the two resolve alike); so whichever runs first, the other compiles only what it adds.
build_all() {
  cargo test --locked --workspace --all-targets --no-run "$@"
}
