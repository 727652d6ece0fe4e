#!/bin/bash
# Split and streaming overhead of pdgate against fast fake engines, all on 127.0.0.1.
#  - split: one client request through pdgate with a prefill and a decode endpoint (prefill leg +
#    decode leg) vs the same two legs sent directly, one after the other (sequential, unique
#    prompts, so every request is split);
#  - stream: a request with "stream": true (200 SSE chunks) through pdgate with a single decode
#    endpoint (aggregated) vs directly; added time to the first chunk, to the end, per chunk, and
#    pdgate CPU time (utime+stime from /proc/PID/stat) per 1,000 streamed chunks.
# Usage: pd-stream-overhead.sh PDGATE_BINARY   Env: N_SPLIT requests (2000), N_STREAM requests
# (300), CHUNKS per stream (200), THREADS pdgate --threads (default: pdgate's own, one per core).
# Fake engines: tools/pd-fake-engine.py (python3 standard library).
set -eu
BIN=${1:?usage: pd-stream-overhead.sh PDGATE_BINARY}
HERE=$(cd "$(dirname "$0")" && pwd)
W=${W:-$(mktemp -d)}; N_SPLIT=${N_SPLIT:-2000}; N_STREAM=${N_STREAM:-300}; CHUNKS=${CHUNKS:-200}
P=18201 D=18202 D2=18203 PD_SPLIT=18211 PD_STREAM=18212
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for port in $P $D $D2; do python3 "$HERE/pd-fake-engine.py" $port "$CHUNKS" & pids+=($!); done
threads=(); [ -n "${THREADS:-}" ] && threads=(--threads "$THREADS")
"$BIN" serve --port $PD_SPLIT "${threads[@]}" --endpoint 127.0.0.1:$P,role=prefill \
  --endpoint 127.0.0.1:$D,role=decode >"$W/pd-split.log" 2>&1 & pids+=($!)
"$BIN" serve --port $PD_STREAM "${threads[@]}" --endpoint 127.0.0.1:$D2,role=decode \
  >"$W/pd-stream.log" 2>&1 & pids+=($!); stream_pid=$!
ready() { # port: 200 on a one-token completion within 30 s
  for _ in $(seq 1 60); do
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
      -d '{"model":"m","prompt":"hi","max_tokens":1}' "http://127.0.0.1:$1/v1/completions" || true)
    [ "$code" = 200 ] && return 0; sleep 0.5
  done
  echo "port $1 not ready (last status $code); logs in $W" >&2; return 1
}
for port in $P $D $D2 $PD_SPLIT $PD_STREAM; do ready $port; done
python3 "$HERE/pd-stream-client.py" split 127.0.0.1:$P 127.0.0.1:$D 127.0.0.1:$PD_SPLIT "$N_SPLIT"
python3 "$HERE/pd-stream-client.py" stream 127.0.0.1:$D2 127.0.0.1:$PD_STREAM "$N_STREAM" "$stream_pid"
