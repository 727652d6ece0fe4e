#!/bin/bash
# Routing quality on ONE simulator fleet (issue 12, item 6): the Mooncake conversation trace and
# the built-in chat workload, each replayed through every arm —
#   pdgate-precise          precise-prefix-cache-producer → prefix-cache-scorer (KV events)
#   pdgate-approx           approx-prefix-cache-producer → prefix-cache-scorer
#   pdgate-default          pdgate's built-in default config
#   pdgate-rr               round-robin-picker
#   vllm-router-kv_aware    PyPI vllm-router, --policy kv_aware (reads the same KV events)
#   vllm-router-cache_aware / vllm-router-round_robin
# — with the fleet's prefix caches reset between runs (POST /reset_prefix_cache on every
# worker; where a worker does not answer it, the fleet is restarted instead). Each run is one
# `pdgate bench --engine-metrics ... --summary` whose row goes into one table per workload:
# policy → cache share from the engines' counters, usage cached share, the offline ceilings
# (infinite cache, one fleet-capacity LRU), TTFT p50/p90/p99, errors, max/fair share.
#
# Arms that need what is not there yet are skipped with the reason, never silently: KV events
# (`pdgate sim --kv-events-config`, vLLM's flag, worker i publishing on KV_PORT+i), a config
# that `pdgate check-config` refuses (precise before its plugins exist), vllm-router not
# installable. Pick arms with ARMS.
#
# Release binaries; everything on 127.0.0.1; bounded request counts; each bench cut at LIMIT_S.
# Not part of .ci/run (minutes of wall time; numbers, not pass/fail).
# Usage: routing-quality.sh [PDGATE_BINARY] [TRACE]
#   (default: target/release/pdgate, ../shared/traces/mooncake_conversation.jsonl)
# Env: WORKERS (4), BLOCK_SIZE (16), GPU_BLOCKS (per worker, 131072: below ~100k the fleet-capacity LRU ceiling of 500 trace requests falls to the no-routing level — 0.042 at 16384 — and every arm ties), SIM_SPEEDUP (10),
#   TRACE_REQUESTS (300), CHAT_REQUESTS (288), REPLAY_SPEEDUP (10), CONCURRENCY (64),
#   MAX_OUTPUT (64), LIMIT_S (600), WORKLOADS ("trace chat"), ARMS (all of the above),
#   KV_PORT (first KV-event port, default: a free range; pdgate learns worker i's port
#   KV_PORT+i from its endpoint label pdgate.io/kv-events-port, vllm-router from
#   --kv-event-source), TOKEN_PROMPTS (1: every arm gets token-id prompts, chat turns as the
#   ids the simulator computes for them, `pdgate bench --token-prompts`, because the precise
#   index keys token ids and main has no token-producer yet; 0: chat as chat),
#   VLLM_ROUTER (its executable; default: tools/install-vllm-router.sh), W (work dir).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$HERE/../target/release/pdgate}
TRACE=${2:-$HERE/../../shared/traces/mooncake_conversation.jsonl}
W=${W:-$(mktemp -d)}
WORKERS=${WORKERS:-4}; BLOCK_SIZE=${BLOCK_SIZE:-16}; GPU_BLOCKS=${GPU_BLOCKS:-131072}
SIM_SPEEDUP=${SIM_SPEEDUP:-10}; TRACE_REQUESTS=${TRACE_REQUESTS:-300}
CHAT_REQUESTS=${CHAT_REQUESTS:-288}; REPLAY_SPEEDUP=${REPLAY_SPEEDUP:-10}
CONCURRENCY=${CONCURRENCY:-64}; MAX_OUTPUT=${MAX_OUTPUT:-64}; LIMIT_S=${LIMIT_S:-600}
WORKLOADS=${WORKLOADS:-trace chat}
ARMS=${ARMS:-pdgate-precise pdgate-approx pdgate-default pdgate-rr vllm-router-kv_aware vllm-router-cache_aware vllm-router-round_robin}
TOKEN_PROMPTS=${TOKEN_PROMPTS:-1}
MODEL=pdgate-sim
[ -x "$BIN" ] || { echo "pdgate binary $BIN not found (cargo build --release -p pdgate)" >&2; exit 1; }
[ -r "$TRACE" ] || { echo "trace $TRACE not readable" >&2; exit 1; }
echo "work dir: $W" >&2

pids=(); sim_pid=""; router_pid=""
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# A free TCP port on 127.0.0.1 (count consecutive free ports from the one printed).
free_ports() { # count
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base = random.randint(20000, 60000 - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
    except OSError:
        continue
    finally:
        for s in socks: s.close()
    print(base); sys.exit(0)
sys.exit("no free port range")
PY
}
# Waits (20 s at most) until FILE has N lines matching PATTERN.
wait_lines() { # file pattern n
  local c
  for _ in $(seq 1 200); do
    c=$(grep -c "$2" "$1" 2>/dev/null) || true
    # (a line may be read half written: stderr is unbuffered; let it finish)
    [ "${c:-0}" -ge "$3" ] && { sleep 0.2; return 0; }; sleep 0.1
  done
  echo "$1: fewer than $3 lines matching '$2'" >&2; tail -n 20 "$1" >&2; return 1
}
# Waits (60 s at most) until URL/health answers 2xx.
wait_health() { # url
  for _ in $(seq 1 600); do curl -sf -o /dev/null "$1/health" && return 0; sleep 0.1; done
  echo "$1 not healthy" >&2; return 1
}

# --- capabilities -------------------------------------------------------------------------
KV_EVENTS=0
if "$BIN" sim --help 2>/dev/null | grep -q -- '--kv-events-config'; then KV_EVENTS=1; fi
KV_PORT=${KV_PORT:-$(free_ports "$WORKERS")}
config() { # template → $W/NAME.yaml with the fleet's values
  sed -e "s/@BLOCK_SIZE@/$BLOCK_SIZE/g" -e "s/@MODEL@/$MODEL/g" -e "s/@KV_PORT@/$KV_PORT/g" \
    "$HERE/routing-quality/$1.yaml" >"$W/$1.yaml"
  echo "$W/$1.yaml"
}
VLLM_ROUTER=${VLLM_ROUTER:-}
want_vllm_router=0
for a in $ARMS; do case $a in vllm-router-*) want_vllm_router=1;; esac; done
if [ "$want_vllm_router" = 1 ] && [ -z "$VLLM_ROUTER" ]; then
  VLLM_ROUTER=$("$HERE/install-vllm-router.sh") || VLLM_ROUTER=""
fi
# Why ARM cannot run here (empty: it can).
skip_reason() { # arm
  case $1 in
    pdgate-precise)
      [ "$KV_EVENTS" = 1 ] || { echo "pdgate sim has no --kv-events-config (branch sim)"; return; }
      "$BIN" check-config "$(config precise)" >"$W/check-precise.txt" 2>&1 ||
        { echo "pdgate check-config refuses precise.yaml: $(head -n 1 "$W/check-precise.txt")"; return; } ;;
    vllm-router-kv_aware)
      [ "$KV_EVENTS" = 1 ] || { echo "pdgate sim has no --kv-events-config (branch sim)"; return; }
      [ -n "$VLLM_ROUTER" ] || { echo "vllm-router not installed"; return; } ;;
    vllm-router-*) [ -n "$VLLM_ROUTER" ] || { echo "vllm-router not installed"; return; } ;;
    pdgate-approx|pdgate-default|pdgate-rr) ;;
    *) echo "unknown arm" ;;
  esac
}

# --- the fleet ----------------------------------------------------------------------------
urls=(); names=()
start_fleet() {
  local kv=()
  [ "$KV_EVENTS" = 1 ] && kv=(--kv-events-config \
    "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:$KV_PORT\"}")
  : >"$W/sim.log"
  "$BIN" sim --host 127.0.0.1 --port 0 --workers "$WORKERS" --model "$MODEL" \
    --block-size "$BLOCK_SIZE" --num-gpu-blocks "$GPU_BLOCKS" --speedup "$SIM_SPEEDUP" \
    "${kv[@]}" >>"$W/sim.log" 2>&1 & sim_pid=$!; pids+=("$sim_pid")
  wait_lines "$W/sim.log" 'listening on' "$WORKERS"
  urls=(); names=()
  # "sim worker NAME role=ROLE revision=- engine=ID listening on http://ADDR"
  while read -r name addr; do names+=("$name"); urls+=("http://$addr"); done < <(
    sed -n 's#^sim worker \([^ ]*\) .* listening on http://\(.*\)$#\1 \2#p' "$W/sim.log")
  for u in "${urls[@]}"; do wait_health "$u"; done
}
stop_fleet() { kill "$sim_pid" 2>/dev/null || true; wait "$sim_pid" 2>/dev/null || true; }
# Empties every worker's prefix cache; restarts the fleet when a worker cannot reset.
reset_fleet() {
  local u
  for u in "${urls[@]}"; do
    if ! curl -sf -o /dev/null -X POST "$u/reset_prefix_cache"; then
      echo "  $u: no POST /reset_prefix_cache; restarting the fleet instead" >&2
      stop_fleet; start_fleet; return
    fi
  done
}

# --- routers ------------------------------------------------------------------------------
router_url=""
start_router() { # arm
  local arm=$1 log="$W/router-$1.log" eps=() i
  case $arm in
    pdgate-*)
      for i in "${!urls[@]}"; do
        local ep="${urls[$i]#http://},name=${names[$i]},role=prefill-decode"
        [ "$KV_EVENTS" = 1 ] && ep+=",pdgate.io/kv-events-port=$((KV_PORT + i))"
        eps+=(--endpoint "$ep")
      done
      local cfg=()
      case $arm in
        pdgate-precise) cfg=(--config "$(config precise)") ;;
        pdgate-approx) cfg=(--config "$(config approximate)") ;;
        pdgate-rr) cfg=(--config "$(config round-robin)") ;;
      esac
      "$BIN" serve --host 127.0.0.1 --port 0 --scrape-interval-ms 50 "${cfg[@]}" "${eps[@]}" \
        >"$log" 2>&1 & router_pid=$!; pids+=("$router_pid")
      # The whole line (stderr is unbuffered: it may be read half written).
      wait_lines "$log" 'pdgate serve listening on http://[^ ]* (' 1
      router_url=$(sed -n 's#^pdgate serve listening on \(http://[^ ]*\).*#\1#p' "$log" | head -n 1) ;;
    vllm-router-*)
      local policy=${arm#vllm-router-} port prom kv=()
      port=$(free_ports 1); prom=$(free_ports 1)
      if [ "$policy" = kv_aware ]; then
        for i in "${!urls[@]}"; do
          kv+=(--kv-event-source "${urls[$i]}=tcp://127.0.0.1:$((KV_PORT + i))")
        done
        kv+=(--kv-event-block-size "$BLOCK_SIZE" --kv-event-model "$MODEL")
      fi
      "$VLLM_ROUTER" --host 127.0.0.1 --port "$port" --worker-urls "${urls[@]}" \
        --policy "$policy" "${kv[@]}" --prometheus-host 127.0.0.1 --prometheus-port "$prom" \
        --worker-startup-check-interval 1 --log-level warning >"$log" 2>&1 &
      router_pid=$!; pids+=("$router_pid")
      router_url="http://127.0.0.1:$port" ;;
  esac
  wait_health "$router_url" || { tail -n 20 "$log" >&2; return 1; }
}
# For a pdgate arm: the KV-event counters and Σ pdgate_kv_index_blocks on its /metrics after
# the run (the proof that the precise index consumed the fleet's events), into $W/kv-WL.txt.
kv_index_note() { # workload arm
  case $2 in pdgate-*) ;; *) return 0 ;; esac
  curl -sf "$router_url/metrics" >"$W/$1-$2.metrics" || return 0
  awk -v arm="$2" '
    /^pdgate_kv_index_blocks[{ ]/ { blocks += $NF; n++ }
    /^pdgate_kv_events_[a-z_]*_total[{ ]/ { split($1, a, "{"); ev[a[1]] += $NF }
    END { printf "  %s: pdgate_kv_index_blocks sum %d over %d series", arm, blocks, n
          for (k in ev) printf "; %s %d", k, ev[k]; print "" }' "$W/$1-$2.metrics" >>"$W/kv-$1.txt"
}
stop_router() { kill "$router_pid" 2>/dev/null || true; wait "$router_pid" 2>/dev/null || true; }

# --- runs ---------------------------------------------------------------------------------
start_fleet
echo "fleet: ${#urls[@]} workers, ${BLOCK_SIZE}-token blocks, $GPU_BLOCKS blocks each, speedup $SIM_SPEEDUP, KV events $([ "$KV_EVENTS" = 1 ] && echo "on ports $KV_PORT+" || echo off)" >&2
for wl in $WORKLOADS; do
  case $wl in
    trace) wflags=(--trace "$TRACE" --limit "$TRACE_REQUESTS") ;;
    chat) wflags=(--workload chat --limit "$CHAT_REQUESTS") ;;
    *) echo "unknown workload $wl" >&2; exit 1 ;;
  esac
  table="$W/quality-$wl.txt"; : >"$table"
  for arm in $ARMS; do
    why=$(skip_reason "$arm")
    if [ -n "$why" ]; then echo "$wl / $arm: skipped: $why" | tee -a "$W/skipped-$wl.txt" >&2; continue; fi
    echo "$wl / $arm" >&2
    reset_fleet
    start_router "$arm" || { echo "$wl / $arm: router did not start" | tee -a "$W/skipped-$wl.txt" >&2; stop_router; continue; }
    em=(); for u in "${urls[@]}"; do em+=(--engine-metrics "$u"); done
    [ "$TOKEN_PROMPTS" = 1 ] && em+=(--token-prompts)
    timeout "$LIMIT_S" "$BIN" bench --url "$router_url" "${wflags[@]}" --model "$MODEL" \
      --speedup "$REPLAY_SPEEDUP" --concurrency "$CONCURRENCY" --max-output-tokens "$MAX_OUTPUT" \
      "${em[@]}" --summary "$table" --label "$arm" --json "$W/$wl-$arm.json" --quiet \
      >"$W/$wl-$arm.txt" 2>&1 || { echo "$wl / $arm: bench failed:" >&2; tail -n 5 "$W/$wl-$arm.txt" >&2; }
    kv_index_note "$wl" "$arm"
    stop_router
  done
done
stop_fleet
for wl in $WORKLOADS; do
  echo
  echo "== $wl ($( [ "$wl" = trace ] && echo "$TRACE_REQUESTS requests of $(basename "$TRACE")" || echo "$CHAT_REQUESTS chat turns"); $WORKERS workers × $GPU_BLOCKS blocks of $BLOCK_SIZE tokens$( [ "$TOKEN_PROMPTS" = 1 ] && echo "; token-id prompts"))"
  cat "$W/quality-$wl.txt"
  [ -s "$W/skipped-$wl.txt" ] && sed 's/^/  /' "$W/skipped-$wl.txt"
  [ -s "$W/kv-$wl.txt" ] && cat "$W/kv-$wl.txt"
done
exit 0
