#!/bin/bash
# Load sweep (issue 12, item 6): does load weigh against prefix where it matters?
# A fleet of WORKERS aggregated simulator workers (`pdgate sim`, no role label, so every
# request runs aggregated) behind `pdgate serve`, one fresh fleet and router per run (caches
# start cold alike). Workloads with shared prefixes: the built-in `chat` workload and the
# Mooncake conversation trace (../shared/traces). Load 1× is a moderate load where
# prefix-aware routing clearly helps; L× replays the same requests L times faster.
# Policies:
#   default   the built-in config (no --config): kv-cost-scorer
#   previous  the default before kv-cost-scorer: prefix 3 + queue 2 + kv-cache-utilization 2
#   prefix    approximate prefix only (prefix-cache-scorer + max-score-picker)
#   rr        round-robin (crates/pdgate-scheduler/configs/round-robin-pd.yaml)
#   NAME      any other name: the config file $W/NAME.yaml (write it there first)
# Prints one row per (workload, load, policy): cache hit share (usage cached_tokens /
# prompt_tokens), TTFT p50/p90/p99 (ms), max/fair share of requests per endpoint (1.00 =
# perfectly even); with REPEATS > 1 each number is the median over the repeats.
# Usage: load-sweep.sh PDGATE_BINARY
# Env: WORKERS (4), LOADS ("1 2"), WORKLOADS ("chat mooncake"),
#      POLICIES ("default previous prefix rr"), REPEATS (1), MAX_OUT (64: max output tokens),
#      per workload: chat — CHAT_LIMIT (288 requests), CHAT_BASE (40: bench --speedup at 1×),
#      CHAT_SIM_SPEEDUP (5), CHAT_BLOCKS (1024 KV blocks per worker: the histories compete);
#      mooncake — MOONCAKE_LIMIT (500), MOONCAKE_BASE (20), MOONCAKE_SIM_SPEEDUP (20),
#      MOONCAKE_BLOCKS (16384: its 14k-token prompts need room); W (work dir).
# Wall time with the defaults: about 2 min per repeat.
# Not part of .ci/run: it measures, it does not assert.
set -eu
BIN=${1:?usage: load-sweep.sh PDGATE_BINARY}
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=${W:-$(mktemp -d)}; WORKERS=${WORKERS:-4}
LOADS=${LOADS:-"1 2"}; WORKLOADS=${WORKLOADS:-"chat mooncake"}
POLICIES=${POLICIES:-"default previous prefix rr"}; REPEATS=${REPEATS:-1}
CHAT_LIMIT=${CHAT_LIMIT:-288}; CHAT_BASE=${CHAT_BASE:-40}
CHAT_SIM_SPEEDUP=${CHAT_SIM_SPEEDUP:-5}; CHAT_BLOCKS=${CHAT_BLOCKS:-1024}
MOONCAKE_LIMIT=${MOONCAKE_LIMIT:-500}; MOONCAKE_BASE=${MOONCAKE_BASE:-20}
MOONCAKE_SIM_SPEEDUP=${MOONCAKE_SIM_SPEEDUP:-20}; MOONCAKE_BLOCKS=${MOONCAKE_BLOCKS:-16384}
MAX_OUT=${MAX_OUT:-64}
TRACE=$HERE/../shared/traces/mooncake_conversation.jsonl
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$1/v1/models" && return 0; sleep 0.1; done; echo "port $1 not up" >&2; return 1; }

cat >"$W/previous.yaml" <<'YAML'
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters: {blockSizeTokens: 16, maxPrefixTokensToMatch: 16384, lruCapacityPerServer: 262144}
- type: prefix-cache-scorer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: decode-filter
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins:
  - {pluginRef: decode-filter}
  - {pluginRef: max-score-picker}
  - {pluginRef: prefix-cache-scorer, weight: 3}
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
YAML
cat >"$W/prefix.yaml" <<'YAML'
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters: {blockSizeTokens: 16, maxPrefixTokensToMatch: 16384, lruCapacityPerServer: 262144}
- type: prefix-cache-scorer
- type: decode-filter
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins:
  - {pluginRef: decode-filter}
  - {pluginRef: max-score-picker}
  - {pluginRef: prefix-cache-scorer}
YAML
config_of() { # a policy NAME with a file $W/NAME.yaml uses it (to try variants)
  [ -f "$W/$1.yaml" ] && { echo "$W/$1.yaml"; return; }
  case $1 in
    default) echo - ;;
    rr) echo "$HERE/crates/pdgate-scheduler/configs/round-robin-pd.yaml" ;;
    *) echo "unknown policy $1" >&2; exit 2 ;;
  esac
}

run_one() { # workload load policy repeat → $W/<workload>-<load>-<policy>-<repeat>.json
  local wl=$1 load=$2 pol=$3 rep=$4 out="$W/$1-$2-$3-$4"
  local sp blocks pd cfg=() src=()
  case $wl in
    chat) sp=$CHAT_SIM_SPEEDUP; blocks=$CHAT_BLOCKS ;;
    *) sp=$MOONCAKE_SIM_SPEEDUP; blocks=$MOONCAKE_BLOCKS ;;
  esac
  "$BIN" sim --port 0 --workers "$WORKERS" --speedup "$sp" --num-gpu-blocks "$blocks" \
    >"$out.sim.log" 2>&1 & local simpid=$!; pids+=($simpid)
  local n
  for _ in $(seq 1 100); do
    n=$(grep -c 'listening on' "$out.sim.log" 2>/dev/null) || true
    [ "${n:-0}" -ge "$WORKERS" ] && break; sleep 0.1
  done
  sleep 0.2 # the last line may be half written (unbuffered stderr)
  local eps=() a
  for a in $(grep -o 'listening on [^ ]*' "$out.sim.log" | awk '{print $3}' | sed 's#http://##'); do eps+=(--endpoint "$a"); done
  pd=$(free_port); local c; c=$(config_of "$pol"); [ "$c" != - ] && cfg=(--config "$c")
  "$BIN" serve --port "$pd" "${eps[@]}" "${cfg[@]}" >"$out.serve.log" 2>&1 & local rpid=$!; pids+=($rpid)
  wait_http "$pd"; sleep 0.5
  case $wl in
    chat) src=(--workload chat --limit "$CHAT_LIMIT"
               --speedup "$(python3 -c "print($CHAT_BASE * $load)")") ;;
    mooncake) src=(--trace "$TRACE" --limit "$MOONCAKE_LIMIT"
                   --speedup "$(python3 -c "print($MOONCAKE_BASE * $load)")") ;;
  esac
  "$BIN" bench --url "http://127.0.0.1:$pd" "${src[@]}" --concurrency 4096 \
    --max-output-tokens "$MAX_OUT" --quiet --json "$out.json" >"$out.txt" 2>&1 || true
  kill "$rpid" "$simpid" 2>/dev/null || true; wait "$rpid" "$simpid" 2>/dev/null || true
}

for wl in $WORKLOADS; do
  for load in $LOADS; do
    for rep in $(seq 1 "$REPEATS"); do
      for pol in $POLICIES; do run_one "$wl" "$load" "$pol" "$rep"; done
    done
  done
done

python3 - "$W" "$WORKERS" "$WORKLOADS" "$LOADS" "$POLICIES" "$REPEATS" <<'PY'
import json, os, statistics, sys
w, workers, wls, loads, pols, reps = sys.argv[1], int(sys.argv[2]), *[a.split() for a in sys.argv[3:6]], int(sys.argv[6])
def row(path):
    try:
        r = json.load(open(path))
    except (OSError, ValueError):
        return None
    counts = list(r["requests_by_endpoint"].values()) + [0] * workers
    counts = sorted(counts, reverse=True)[:workers]
    fair = sum(counts) / workers if counts else 0
    t = r["ttft_ms"]
    return [r["cached_token_ratio"], t["p50"], t["p90"], t["p99"], max(counts) / fair if fair else 0,
            r["ok"], r["requests"]]
print(f"{'workload':9} {'load':>4} {'policy':9} {'cache':>6} {'p50':>7} {'p90':>7} {'p99':>7} {'max/fair':>8} {'ok/sent':>9}")
for wl in wls:
    for load in loads:
        for pol in pols:
            rows = [x for x in (row(os.path.join(w, f"{wl}-{load}-{pol}-{k}.json")) for k in range(1, reps + 1)) if x]
            if not rows:
                print(f"{wl:9} {load:>4} {pol:9} (no result)"); continue
            m = [statistics.median(c) for c in zip(*rows)]
            print(f"{wl:9} {load+'x':>4} {pol:9} {m[0]:6.3f} {m[1]:7.0f} {m[2]:7.0f} {m[3]:7.0f} {m[4]:8.2f} {int(m[5]):>4}/{int(m[6]):<4}")
PY
echo "(work dir: $W)"
