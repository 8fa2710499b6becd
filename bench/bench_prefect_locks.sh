#!/usr/bin/env bash
# How many `database is locked` lines a busy Prefect server (SQLite) logs, with a worker's default polling and with
# PREFECT_WORKER_QUERY_SECONDS=60 (README, "A busy Prefect server, and stopping a worker"). Per setting: a fresh
# `prefect server start` on port 4299 (a temporary PREFECT_HOME), a process work pool and worker, two flow runs of
# 400 tasks each through a deployment, six busy loops beside them until both runs finish. About 2 x 2 minutes.
#     bench/bench_prefect_locks.sh            # prints one line per setting
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/.venv/bin
work=$(mktemp -d /tmp/prefect-locks.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/load.py" <<'EOF'
from prefect import flow, task


@task
def one(i: int) -> int:
    return 2 * i


@flow
def many(n: int = 400) -> int:
    return sum(f.result() for f in one.map(range(n)))


if __name__ == "__main__":
    import os

    many.from_source(source=os.path.dirname(os.path.abspath(__file__)), entrypoint="load.py:many").deploy(
        name="many", work_pool_name="p", build=False, print_next_steps=False
    )
EOF

measure() {  # measure TAG [ENV=VALUE for the worker ...]
    local tag=$1 loops="" server worker t0
    shift
    export PREFECT_HOME=$work/home-$tag PREFECT_SERVER_ANALYTICS_ENABLED=false
    nice -n 10 "$bin/prefect" server start --host 127.0.0.1 --port 4299 > "$work/server-$tag.log" 2>&1 &
    server=$!
    for _ in $(seq 1 150); do curl -s http://127.0.0.1:4299/api/health > /dev/null && break; sleep 2; done
    export PREFECT_API_URL=http://127.0.0.1:4299/api
    "$bin/prefect" work-pool create p --type process > /dev/null 2>&1
    (cd "$work" && "$bin/python" load.py > /dev/null 2>&1)
    # SIGINT at its default: a worker started with & in a script ignores it, and then SIGTERM too (README)
    env "$@" nice -n 10 "$bin/python" -c "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); \
os.execv(sys.executable, [sys.executable, '$bin/prefect', 'worker', 'start', '--pool', 'p'])" \
        > "$work/worker-$tag.log" 2>&1 &
    worker=$!
    sleep 10
    for _ in 1 2 3 4 5 6; do nice -n 10 sh -c 'while :; do :; done' & loops="$loops $!"; done
    t0=$(date +%s)
    "$bin/python" -c "from prefect.deployments import run_deployment
for _ in range(2): run_deployment('many/many', parameters={'n': 400}, timeout=0)" > /dev/null 2>&1
    while [ "$(grep -c 'Flow run .* - Finished in state' "$work/worker-$tag.log")" -lt 2 ] \
        && [ $(($(date +%s) - t0)) -lt 600 ]; do sleep 3; done
    kill $loops
    local log=$work/server-$tag.log
    echo "$tag: $(($(date +%s) - t0)) s, $(grep -c 'Flow run .* - Finished in state Completed' "$work/worker-$tag.log")" \
        "flow runs completed, $(grep -c 'database is locked' "$log") 'database is locked' lines; errors logged:" \
        "$(grep -c '| ERROR .*mark_[a-z_]*_ready' "$log") of the polls' mark_*_ready, $(grep '| ERROR' "$log" |
            grep -vc 'mark_[a-z_]*_ready') others"
    kill -TERM "$worker" "$server" 2> /dev/null || true
    sleep 5
    kill -9 "$worker" "$server" 2> /dev/null || true
}

measure default
measure query60 PREFECT_WORKER_QUERY_SECONDS=60
