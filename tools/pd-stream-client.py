#!/usr/bin/env python3
"""Sequential client of tools/pd-stream-overhead.sh (standard library only).

Usage: pd-stream-client.py MODE ARGS...
  split P D ROUTER N       N rounds of: prefill leg to P + decode leg to D (direct), then the same
                           client request through ROUTER (split there); unique prompts.
  stream D ROUTER N PID    N rounds of: a streamed request to D (direct), then through ROUTER;
                           PID = the router's pid, for its CPU time over the routed streams.
Prints one `key=value ...` line per measured quantity (latencies in µs).
"""
import http.client
import json
import os
import sys
import time

WORDS = " ".join("word%d" % i for i in range(300))


def conn(hostport):
    host, port = hostport.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.connect()
    import socket

    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def post(c, body):
    data = json.dumps(body).encode()
    c.request("POST", "/v1/completions", body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.read()
    if r.status != 200:
        raise SystemExit("HTTP %d: %s" % (r.status, out[:300]))
    return r, out


def stream(c, body):
    """(ttft_s, e2e_s, chunks) of one streamed request, timed from the send."""
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit("HTTP %d: %s" % (r.status, r.read()[:300]))
    ttft = None
    chunks = 0
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            if ttft is None:
                ttft = time.perf_counter() - t0
            if line.startswith(b"data: [DONE]"):
                continue
            if b'"error"' in line:
                raise SystemExit("stream error: %r" % line[:300])
            chunks += 1
    return ttft, time.perf_counter() - t0, chunks


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def us(x):
    return "%.0f" % (x * 1e6)


def summary(name, xs):
    return "%s_p50=%s %s_p99=%s %s_mean=%s" % (
        name, us(pct(xs, 0.5)), name, us(pct(xs, 0.99)), name, us(sum(xs) / len(xs)))


def cpu_ticks(pid):
    with open("/proc/%s/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def body(i, stream_=False):
    b = {"model": "m", "prompt": "req%d %s" % (i, WORDS), "max_tokens": 200 if stream_ else 1}
    if stream_:
        b["stream"] = True
    return b


def split(p, d, router, n):
    cp, cd, cr = conn(p), conn(d), conn(router)
    direct, routed, modes = [], [], {}
    for i in range(-20, n):  # 20 rounds of warm-up
        b = body(1_000_000 + i)
        pre = dict(b, max_tokens=1, stream=False,
                   kv_transfer_params={"do_remote_decode": True, "do_remote_prefill": False})
        t0 = time.perf_counter()
        _, out = post(cp, pre)
        kv = json.loads(out)["kv_transfer_params"]
        post(cd, dict(b, kv_transfer_params=kv))
        t1 = time.perf_counter()
        r, _ = post(cr, b)
        t2 = time.perf_counter()
        mode = r.getheader("x-pdgate-pd-mode") or "?"
        if i >= 0:
            direct.append(t1 - t0)
            routed.append(t2 - t1)
            modes[mode] = modes.get(mode, 0) + 1
    print("split n=%d modes=%s %s %s added_p50=%s added_mean=%s" % (
        n, json.dumps(modes, separators=(",", ":")), summary("direct", direct),
        summary("pdgate", routed), us(pct(routed, 0.5) - pct(direct, 0.5)),
        us(sum(routed) / n - sum(direct) / n)))


def stream_mode(d, router, n, pid):
    cd, cr = conn(d), conn(router)
    for i in range(20):  # warm-up
        stream(cd, body(i, True))
        stream(cr, body(i, True))
    dt, de, rt, re_ = [], [], [], []
    cpu = 0
    chunks_total = 0
    hz = os.sysconf("SC_CLK_TCK")
    for i in range(n):
        t, e, k = stream(cd, body(i, True))
        dt.append(t)
        de.append(e)
        c0 = cpu_ticks(pid)
        t, e, k2 = stream(cr, body(i, True))
        cpu += cpu_ticks(pid) - c0
        rt.append(t)
        re_.append(e)
        if k != k2:
            raise SystemExit("chunk count differs: direct %d, pdgate %d" % (k, k2))
        chunks_total += k2
    chunks = chunks_total // n
    add_e2e = pct(re_, 0.5) - pct(de, 0.5)
    add_ttft = pct(rt, 0.5) - pct(dt, 0.5)
    print("stream n=%d chunks=%d %s %s %s %s added_ttft_p50=%s added_e2e_p50=%s "
          "added_per_chunk_us=%.2f pdgate_cpu_ms_per_1000_chunks=%.2f" % (
              n, chunks, summary("direct_ttft", dt), summary("direct_e2e", de),
              summary("pdgate_ttft", rt), summary("pdgate_e2e", re_), us(add_ttft), us(add_e2e),
              (add_e2e - add_ttft) * 1e6 / chunks, cpu * 1000.0 / hz / chunks_total * 1000))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "split":
        split(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "stream":
        stream_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        raise SystemExit(__doc__)
