#!/bin/bash
# Flow control under overload (issue 10): a fleet of simulator workers (`pdgate sim`, WORKERS
# workers of MAX_SEQS running requests each) behind `pdgate serve`, on one box.
#  1. capacity: a closed loop of WORKERS×MAX_SEQS requests in flight, no flow control;
#  2. overload at OVERLOAD× that rate for DUR seconds (open loop), without flow control and
#     with it (concurrency-detector at MAX_SEQS, TTL TTL, band maxRequests QUEUE): goodput
#     (answered 200 per second) against capacity, TTFT of the answered, refusals by status and
#     by `x-llm-d-request-dropped-reason` (from pdgate's /metrics), pdgate's peak RSS;
#  3. bands: a high band (objective `chat`, priority 10) at HIGH× capacity alone, then beside a
#     low band (objective `batch`, priority -1) at OVERLOAD× capacity: the high band's TTFT.
# Usage: overload.sh PDGATE_BINARY   Env: WORKERS (2), MAX_SEQS (8), OVERLOAD (3), HIGH (0.5),
# DUR (15), TTL (1s), QUEUE (32), IN (256), OUT (32).
set -eu
BIN=${1:?usage: overload.sh PDGATE_BINARY}
W=${W:-$(mktemp -d)}; WORKERS=${WORKERS:-2}; MAX_SEQS=${MAX_SEQS:-8}; OVERLOAD=${OVERLOAD:-3}
HIGH=${HIGH:-0.5}; DUR=${DUR:-15}; TTL=${TTL:-1s}; QUEUE=${QUEUE:-32}; IN=${IN:-256}; OUT=${OUT:-32}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_http() { for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$1/v1/models" && return 0; sleep 0.1; done; echo "port $1 not up" >&2; return 1; }
trace() { # file rate(rps, 0 = all at once) count first_id
  python3 - "$@" "$IN" "$OUT" <<'PY'
import json, sys
path, rate, n, first, inp, out = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
with open(path, "w") as f:
    for i in range(n):
        ts = 0 if rate == 0 else int(i * 1000 / rate)
        f.write(json.dumps({"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": [first + i]}) + "\n")
PY
}
summary() { python3 - "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); name = sys.argv[2]; cap = float(sys.argv[3])
good = r["ok"] / r["duration_s"]
print("%-22s offered=%d ok=%d errors=%s goodput=%.1f/s goodput/capacity=%.2f ttft_p50=%.0fms ttft_p99=%.0fms"
      % (name, r["requests"], r["ok"], json.dumps(r["errors"]), good, good / cap if cap else 0,
         r["ttft_ms"]["p50"], r["ttft_ms"]["p99"]))
PY
}
"$BIN" sim --port 0 --workers "$WORKERS" --max-num-seqs "$MAX_SEQS" >"$W/sim.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do [ "$(grep -c 'listening on' "$W/sim.log" 2>/dev/null)" -ge "$WORKERS" ] && break; sleep 0.1; done
mapfile -t addrs < <(grep -o 'listening on [^ ]*' "$W/sim.log" | awk '{print $3}' | sed 's#http://##')
eps=(); for a in "${addrs[@]}"; do eps+=(--endpoint "$a"); done
cat >"$W/flow.yaml" <<YAML
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: $MAX_SEQS}
- type: queue-scorer
- type: max-score-picker
flowControl:
  defaultRequestTTL: $TTL
  defaultPriorityBand: {maxRequests: $QUEUE}
  saturationDetector: {pluginRef: concurrency-detector}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
YAML
router() { # name config(or -) → sets URL, RPID
  local pd=$(free_port) cfg=()
  [ "$2" != - ] && cfg=(--config "$2")
  "$BIN" serve --port "$pd" "${eps[@]}" "${cfg[@]}" --inference-objective chat=10 \
    --inference-objective batch=-1 >"$W/pd-$1.log" 2>&1 & pids+=($!)
  RPID=$!; wait_http "$pd"; sleep 0.5; URL=http://127.0.0.1:$pd
}
bench() { # name trace [header]
  local h=(); [ -n "${3:-}" ] && h=(--header "$3")
  "$BIN" bench --url "$URL" --trace "$2" --concurrency 4096 --quiet --json "$W/$1.json" "${h[@]}" >"$W/$1.txt" 2>&1
}
reasons() { curl -s "$URL/metrics" | grep -E '^llm_d_epp_flow_control_requests_total' | sed 's/llm_d_epp_flow_control_requests_total//' | tr '\n' ' '; echo; }
peak_rss() { awk '/VmHWM/ {print $2/1024 " MB"}' /proc/$RPID/status; }

# 1. Capacity: closed loop at the fleet's batch size.
router capacity -
conc=$((WORKERS * MAX_SEQS)); trace "$W/cap.jsonl" 0 $((conc * 20)) 1000000
"$BIN" bench --url "$URL" --trace "$W/cap.jsonl" --concurrency "$conc" --quiet --json "$W/cap.json" >"$W/cap.txt" 2>&1
cap=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["ok"]/r["duration_s"])' "$W/cap.json")
summary "$W/cap.json" capacity "$cap"
kill $RPID; sleep 0.5
rate=$(python3 -c "print($cap * $OVERLOAD)"); n=$(python3 -c "print(int($cap * $OVERLOAD * $DUR))")
trace "$W/over.jsonl" "$rate" "$n" 2000000

# 2. Overload, without and with flow control.
router nogate -
bench nogate "$W/over.jsonl"; summary "$W/nogate.json" "${OVERLOAD}x no flow control" "$cap"
echo "  pdgate peak RSS $(peak_rss)"; kill $RPID; sleep 1
router gate "$W/flow.yaml"
bench gate "$W/over.jsonl"; summary "$W/gate.json" "${OVERLOAD}x flow control" "$cap"
echo "  outcomes: $(reasons)"; echo "  pdgate peak RSS $(peak_rss)"

# 3. Bands: the high band alone, then beside an overloading low band.
hr=$(python3 -c "print($cap * $HIGH)"); hn=$(python3 -c "print(int($cap * $HIGH * $DUR))")
trace "$W/high.jsonl" "$hr" "$hn" 3000000; trace "$W/high2.jsonl" "$hr" "$hn" 4000000
trace "$W/low.jsonl" "$rate" "$n" 5000000
bench high-alone "$W/high.jsonl" "x-llm-d-inference-objective: chat"
summary "$W/high-alone.json" "high band alone" "$cap"
bench low "$W/low.jsonl" "x-llm-d-inference-objective: batch" & lowpid=$!
bench high "$W/high2.jsonl" "x-llm-d-inference-objective: chat"; wait $lowpid
summary "$W/high.json" "high band + low band" "$cap"; summary "$W/low.json" "low band (shed)" "$cap"
echo "  outcomes: $(reasons)"; echo "  pdgate peak RSS $(peak_rss)"
