#!/bin/bash
# Memory per concurrent stream through pdgate: one slow simulator worker (`pdgate sim
# --speedup 0.05`, room for every request in its batch), `pdgate serve` in front, then N
# streaming completions held open for HOLD seconds by a Python asyncio client; pdgate's RSS
# idle and at its peak (sampled each second), and (peak − idle) / N.
# Usage: stream-memory.sh PDGATE_BINARY [N]   Env: HOLD (20).
set -eu
BIN=${1:?usage: stream-memory.sh PDGATE_BINARY [N]}; N=${2:-2000}; HOLD=${HOLD:-20}
W=${W:-$(mktemp -d)}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=(); cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }; trap cleanup EXIT
wait_http() { for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$1/v1/models" && return 0; sleep 0.1; done; echo "port $1 not up" >&2; return 1; }
sim=$(free_port); pd=$(free_port)
"$BIN" sim --port "$sim" --max-num-seqs 8192 --num-gpu-blocks 200000 --max-num-batched-tokens 1000000 --speedup 0.05 >"$W/sim.log" 2>&1 & pids+=($!)
wait_http "$sim"
"$BIN" serve --port "$pd" --endpoint "127.0.0.1:$sim" >"$W/pd.log" 2>&1 & pids+=($!); rpid=$!
wait_http "$pd"; sleep 1
curl -s -o /dev/null -H 'content-type: application/json' -d '{"model":"pdgate-sim","prompt":[1,2,3],"max_tokens":2}' "http://127.0.0.1:$pd/v1/completions"
idle=$(awk '/VmRSS/ {print $2}' /proc/$rpid/status)
python3 - "$pd" "$N" "$HOLD" >"$W/client.log" 2>&1 <<'PY' & cl=$!
import asyncio, json, sys
port, n, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
body = json.dumps({"model": "pdgate-sim", "prompt": list(range(16)), "max_tokens": 4000, "stream": True}).encode()
req = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
ok = 0
async def one():
    global ok
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(req); await w.drain()
    if (await r.read(4096)).startswith(b"HTTP/1.1 200"): ok += 1
    end = asyncio.get_running_loop().time() + hold
    while asyncio.get_running_loop().time() < end:
        if not await r.read(65536): break
        await asyncio.sleep(0.2)
    w.close()
async def main():
    tasks = [asyncio.create_task(one()) for _ in range(n)]
    await asyncio.sleep(hold * 0.6); print("streams with a 200 head:", ok, flush=True)
    await asyncio.gather(*tasks, return_exceptions=True)
asyncio.run(main())
PY
peak=0
for _ in $(seq 1 $((HOLD * 8 / 10))); do sleep 1; r=$(awk '/VmRSS/ {print $2}' /proc/$rpid/status); [ "$r" -gt "$peak" ] && peak=$r; done
inflight=$(curl -s "http://127.0.0.1:$pd/metrics" | awk '/^pdgate_in_flight/ {s+=$2} END {print s}')
wait $cl; cat "$W/client.log"
echo "N=$N in_flight_at_peak=$inflight idle_rss_kb=$idle peak_rss_kb=$peak per_stream_kb=$(( (peak - idle) / N ))"
