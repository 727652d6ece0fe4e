#!/bin/bash
# What running several pdgate replicas costs (issue 11, item 3): the held trace replay — the
# first REQUESTS (500) requests of the Mooncake conversation trace, replayed as
# crates/pdgate/tests/e2e_trace.rs does (2 prefill + 4 decode `pdgate sim` workers at speedup
# 10 with 262,144 KV blocks each, the built-in default config, 50 ms scrapes, replay speedup
# 10, concurrency 128, ordered) — once through 1 `pdgate serve` and once through 2 replicas
# over the same kind of fleet, the client alternating request by request
# (`pdgate bench --url A --url B`, as behind a Service without session affinity). Every run
# starts a fresh simulator process, so caches start empty; rounds alternate 1 and 2 replicas.
# Prints, per run and as medians over RUNS rounds: cached-token ratio, TTFT p50/p90/p99, the
# 2-replica / 1-replica ratios, and each replica's own request count (its /metrics).
# Everything on 127.0.0.1, ephemeral ports; each bench is cut at LIMIT_S seconds.
# Usage: replicas.sh PDGATE_BINARY [TRACE]
# Env: RUNS (3), REQUESTS (500), SPEEDUP (10), LIMIT_S (600), W (work dir, default mktemp -d).
set -eu
BIN=${1:?usage: replicas.sh PDGATE_BINARY [TRACE]}
TRACE=${2:-$(dirname "$0")/../../shared/traces/mooncake_conversation.jsonl}
W=${W:-$(mktemp -d)}; RUNS=${RUNS:-3}; REQUESTS=${REQUESTS:-500}; SPEEDUP=${SPEEDUP:-10}
LIMIT_S=${LIMIT_S:-600}
[ -r "$TRACE" ] || { echo "trace $TRACE not readable" >&2; exit 1; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Waits (10 s at most) until FILE has N lines matching PATTERN.
wait_lines() { # file pattern n
  local c
  for _ in $(seq 1 100); do
    c=$(grep -c "$2" "$1" 2>/dev/null) || true
    [ "${c:-0}" -ge "$3" ] && return 0; sleep 0.1
  done
  echo "$1: fewer than $3 lines matching '$2'" >&2; cat "$1" >&2; return 1
}
# Waits (10 s at most) until URL/health answers 200 and URL/v1/models lists a model.
wait_ready() { # url
  for _ in $(seq 1 100); do
    curl -sf -o /dev/null "$1/health" && curl -sf "$1/v1/models" | grep -q '"id"' && return 0
    sleep 0.1
  done
  echo "$1 not ready" >&2; return 1
}

# One run on a fresh fleet through N replicas; writes $W/TAG.json (the bench report) and
# $W/TAG.served (each replica's pdgate_requests_total, summed over its series).
run() { # tag replicas
  local tag=$1 n=$2 sim_pid eps=() urls=() rpids=()
  "$BIN" sim --port 0 --roles prefill,prefill,decode,decode,decode,decode --speedup "$SPEEDUP" \
    --num-gpu-blocks 262144 >"$W/sim-$tag.log" 2>&1 & pids+=($!); sim_pid=$!
  wait_lines "$W/sim-$tag.log" 'listening on' 6
  # "sim worker NAME role=ROLE revision=- engine=ID listening on http://ADDR"
  while read -r name role addr; do
    eps+=(--endpoint "$addr,name=$name,role=$role")
  done < <(sed -n 's#^sim worker \([^ ]*\) role=\([^ ]*\) .* listening on http://\(.*\)$#\1 \2 \3#p' \
    "$W/sim-$tag.log")
  for i in $(seq 1 "$n"); do
    "$BIN" serve --host 127.0.0.1 --port 0 --scrape-interval-ms 50 "${eps[@]}" \
      >"$W/pd-$tag-$i.log" 2>&1 & pids+=($!); rpids+=($!)
    wait_lines "$W/pd-$tag-$i.log" 'pdgate serve listening on' 1
    urls+=("$(sed -n 's#^pdgate serve listening on \(http://[^ ]*\).*#\1#p' "$W/pd-$tag-$i.log")")
  done
  for u in "${urls[@]}"; do wait_ready "$u"; done
  local flags=(); for u in "${urls[@]}"; do flags+=(--url "$u"); done
  timeout "$LIMIT_S" "$BIN" bench "${flags[@]}" --trace "$TRACE" --limit "$REQUESTS" \
    --speedup "$SPEEDUP" --concurrency 128 --ordered --model pdgate-sim --quiet \
    --json "$W/$tag.json" >"$W/$tag.txt" 2>&1 || { cat "$W/$tag.txt" >&2; return 1; }
  : >"$W/$tag.served"
  for u in "${urls[@]}"; do
    curl -sf "$u/metrics" | awk '/^pdgate_requests_total/ {s += $2} END {print s + 0}' \
      >>"$W/$tag.served"
  done
  # Routers first (a router outliving its engines only logs failing scrapes), then the fleet.
  kill "${rpids[@]}" 2>/dev/null || true; wait "${rpids[@]}" 2>/dev/null || true
  kill "$sim_pid" 2>/dev/null || true; wait "$sim_pid" 2>/dev/null || true
}

for r in $(seq 1 "$RUNS"); do
  for n in 1 2; do
    echo "round $r: $n replica(s)" >&2
    run "r$r-n$n" "$n"
  done
done

python3 - "$W" "$RUNS" "$REQUESTS" <<'PY'
import json, statistics, sys
w, runs, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
keys = [("cached-token ratio", lambda r: r["cached_token_ratio"], "%.3f")] + [
    ("TTFT p%s ms" % p, (lambda p: lambda r: r["ttft_ms"]["p" + p])(p), "%.1f")
    for p in ("50", "90", "99")]
rows = {1: [], 2: []}
for n in (1, 2):
    for r in range(1, runs + 1):
        rep = json.load(open("%s/r%d-n%d.json" % (w, r, n)))
        served = open("%s/r%d-n%d.served" % (w, r, n)).read().split()
        errors = rep["requests"] - rep["ok"]
        print("run %d, %d replica(s): ok %d/%d, errors %s, per replica (its /metrics) %s, %s" % (
            r, n, rep["ok"], rep["requests"], json.dumps(rep["errors"]), "/".join(served),
            ", ".join(name + " " + fmt % get(rep) for name, get, fmt in keys)))
        if errors or rep["requests"] != requests:
            sys.exit("run %d with %d replica(s) did not answer all %d requests" % (r, n, requests))
        rows[n].append(rep)
print()
print("| held trace replay, %d requests, median of %d run(s) | 1 replica | 2 replicas, client alternating | 2 / 1 |" % (requests, runs))
print("|---|---|---|---|")
for name, get, fmt in keys:
    one = statistics.median(get(r) for r in rows[1])
    two = statistics.median(get(r) for r in rows[2])
    print("| %s | %s | %s | %.2f |" % (name, fmt % one, fmt % two, two / one if one else float("nan")))
PY
