#!/bin/bash
# Streamed output tokens/s through pdgate vs direct, on one box: one simulator worker
# (`pdgate sim`, restarted for each run so both start with a cold prefix cache), the built-in
# chat workload (`pdgate bench --workload chat --speedup 0`, i.e. as fast as the concurrency
# allows) at CONCURRENCY (128), first directly against the simulator, then through
# `pdgate serve --endpoint 127.0.0.1:SIM`. The simulator and the bench client are TOOL's; the
# router is ROUTER's, so two routers are compared with everything else the same.
# Usage: stream-throughput.sh TOOL_BINARY [ROUTER_BINARY]   Env: SIM_SPEEDUP (simulator
# --speedup, 1), CONCURRENCY (128), LIMIT (requests, all), SIM_ARGS (extra `pdgate sim` flags).
set -eu
TOOL=${1:?usage: stream-throughput.sh TOOL_BINARY [ROUTER_BINARY]}; ROUTER=${2:-$1}
W=${W:-$(mktemp -d)}; SIM_SPEEDUP=${SIM_SPEEDUP:-1}; CONCURRENCY=${CONCURRENCY:-128}
limit=(); [ -n "${LIMIT:-}" ] && limit=(--limit "$LIMIT")
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_http() { for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$1/v1/models" && return 0; sleep 0.1; done; echo "port $1 not up" >&2; return 1; }
tps() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%s requests=%d ok=%d output_tokens=%d duration_s=%.2f output_tokens_per_s=%.0f ttft_p50_ms=%.1f itl_p50_ms=%.2f" % (sys.argv[2], r["requests"], r["ok"], r["output_tokens"], r["duration_s"], r["output_tokens_per_s"], r["ttft_ms"]["p50"], r["itl_ms"]["p50"]))' "$@"; }
run() { # name, via-router (0/1)
  local sim=$(free_port)
  "$TOOL" sim --port "$sim" --speedup "$SIM_SPEEDUP" ${SIM_ARGS:-} >"$W/sim-$1.log" 2>&1 & pids+=($!)
  local simpid=$!
  wait_http "$sim"
  local url=http://127.0.0.1:$sim rpid=
  if [ "$2" = 1 ]; then
    local pd=$(free_port)
    "$ROUTER" serve --port "$pd" --endpoint "127.0.0.1:$sim" >"$W/pd-$1.log" 2>&1 & pids+=($!)
    rpid=$!
    wait_http "$pd"; sleep 0.5; url=http://127.0.0.1:$pd
  fi
  "$TOOL" bench --url "$url" --workload chat --speedup 0 --concurrency "$CONCURRENCY" "${limit[@]}" \
    --quiet --json "$W/$1.json" >"$W/$1.txt" 2>&1
  tps "$W/$1.json" "$1"
  [ -n "$rpid" ] && kill "$rpid"
  kill "$simpid"; sleep 0.5
}
run direct 0
run pdgate 1
python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); print("ratio pdgate/direct output_tokens_per_s=%.3f" % (b["output_tokens_per_s"]/a["output_tokens_per_s"]))' "$W/direct.json" "$W/pdgate.json"
