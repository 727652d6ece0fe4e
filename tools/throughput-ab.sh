#!/bin/bash
# Requests/s and CPU per request of several proxies in alternating rounds, against nginx as a
# plain proxy, with the backends, nginx settings and load of ../shared/tools/proxy-overhead.sh
# (two canned-completion nginx backends with one worker, nginx proxy with NGINX_WORKERS
# workers, wrk -t2 -cCONC POST /v1/completions with a ~2 KB prompt). On a shared machine one
# run of each is noise; alternating rounds and the median of same-round ratios is not.
# Usage: throughput-ab.sh NAME=CMD...   ({PORT} is the proxy's port, {B1} {B2} the backends')
# e.g.   throughput-ab.sh "pdgate=target/release/pdgate serve --port {PORT} --endpoint 127.0.0.1:{B1} --endpoint 127.0.0.1:{B2}"
# Env: DUR seconds per run (5), ROUNDS (6), CONC (32), NGINX_WORKERS (cores).
# Prints one line per run (rps, p99, user and system CPU µs per request of the proxy process,
# nginx's summed over its workers) and per proxy the medians and its ratio to nginx.
set -u
W=$(mktemp -d); DUR=${DUR:-5}; ROUNDS=${ROUNDS:-6}; CONC=${CONC:-32}; NGINX_WORKERS=${NGINX_WORKERS:-$(nproc)}
command -v nginx >/dev/null && command -v wrk >/dev/null || apt-get install -y -q nginx-light wrk >/dev/null
B1=18301 B2=18302 NG=18310
body='{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" ok","finish_reason":"length","logprobs":null}],"usage":{"prompt_tokens":500,"completion_tokens":1,"total_tokens":501}}'
cat > $W/be.conf <<BE
location = /v1/models { default_type application/json; return 200 '{"object":"list","data":[{"id":"m","object":"model","owned_by":"bench"}]}'; }
location = /metrics { default_type text/plain; return 200 'vllm:num_requests_running{engine="0",model_name="m"} 0\nvllm:num_requests_waiting{engine="0",model_name="m"} 0\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0\n'; }
location = /health { return 200 ''; }
location / { default_type application/json; return 200 '$body'; }
BE
cat > $W/be-nginx.conf <<NG
worker_processes 1; pid $W/be.pid; error_log $W/be-err.log; daemon on;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 100000;
  server { listen 127.0.0.1:$B1; include $W/be.conf; }
  server { listen 127.0.0.1:$B2; include $W/be.conf; } }
NG
cat > $W/nginx.conf <<NG
worker_processes $NGINX_WORKERS; pid $W/nginx.pid; error_log $W/err.log; daemon on;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 100000;
  upstream be { server 127.0.0.1:$B1; server 127.0.0.1:$B2; keepalive 128; }
  server { listen 127.0.0.1:$NG; location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NG
prompt=$(python3 -c "print(' '.join(['word%d'%i for i in range(300)]))")
printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = %s\n' \
  "'{\"model\":\"m\",\"prompt\":\"$prompt\",\"max_tokens\":1}'" > $W/post.lua
nginx -c $W/be-nginx.conf -p $W && nginx -c $W/nginx.conf -p $W
names=(nginx); declare -A port=([nginx]=$NG) pid=([nginx]=$(cat $W/nginx.pid)); i=0
for spec in "$@"; do
  name=${spec%%=*}; cmd=${spec#*=}; p=$((18320+i)); i=$((i+1)); names+=("$name"); port[$name]=$p
  cmd=${cmd//\{PORT\}/$p}; cmd=${cmd//\{B1\}/$B1}; cmd=${cmd//\{B2\}/$B2}
  bash -c "exec $cmd" >$W/$name.log 2>&1 & pid[$name]=$!
done
cleanup() { for n in "${names[@]:1}"; do kill ${pid[$n]} 2>/dev/null; done
  nginx -c $W/nginx.conf -p $W -s stop 2>/dev/null; nginx -c $W/be-nginx.conf -p $W -s stop 2>/dev/null; }
trap cleanup EXIT
ticks() { # pid -> user*1e6 + system clock ticks of the process (and of its child processes)
  local t=0; for q in $1 $(pgrep -P $1); do t=$((t + $(awk '{print $14*1000000+$15}' /proc/$q/stat))); done; echo $t; }
for n in "${names[@]}"; do # ready: a completion answers 200
  for _ in $(seq 60); do
    [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d '{"model":"m","prompt":"hi","max_tokens":1}' http://127.0.0.1:${port[$n]}/v1/completions)" = 200 ] && break; sleep 1
  done
done
hz=$(getconf CLK_TCK)
for r in $(seq 1 $ROUNDS); do for n in "${names[@]}"; do
  t0=$(ticks ${pid[$n]})
  out=$(wrk -t2 -c$CONC -d${DUR}s --latency -s $W/post.lua http://127.0.0.1:${port[$n]}/v1/completions 2>&1)
  t1=$(ticks ${pid[$n]})
  echo "$out" | awk -v r=$r -v n=$n -v t0=$t0 -v t1=$t1 -v hz=$hz '
    /requests in/ {reqs=$1} /Requests\/sec/ {rps=$2} / 99%/ {p99=$2} /Non-2xx/ {bad=$5}
    END { d=t1-t0; u=int(d/1000000); s=d-u*1000000;
      printf "round=%d %s rps=%s p99=%s non2xx=%d user_us=%.1f sys_us=%.1f\n", r, n, rps, p99, bad, u*1e6/hz/reqs, s*1e6/hz/reqs }'
done; done | tee $W/runs.txt
python3 - $W/runs.txt <<'PY'
import sys, statistics as st
runs = [dict(kv.split('=', 1) for kv in l.split()[2:]) | {'round': l.split()[0][6:], 'name': l.split()[1]} for l in open(sys.argv[1])]
def ms(v):  # wrk's latency: 812.00us, 2.45ms, 1.02s
    for suffix, scale in (('us', 1e-3), ('ms', 1.0), ('s', 1e3)):
        if v.endswith(suffix):
            return float(v[:-len(suffix)]) * scale
ng = {x['round']: x for x in runs if x['name'] == 'nginx'}
for name in dict.fromkeys(x['name'] for x in runs):
    v = [x for x in runs if x['name'] == name]
    ratio = [float(x['rps']) / float(ng[x['round']]['rps']) for x in v]
    p99 = [ms(x['p99']) / ms(ng[x['round']]['p99']) for x in v]
    print(f"{name:10s} rps {st.median(float(x['rps']) for x in v):8.0f}  vs nginx {st.median(ratio):.2f} "
          f"[{min(ratio):.2f}-{max(ratio):.2f}]  p99 vs nginx {st.median(p99):.2f}  "
          f"CPU/req user {st.median(float(x['user_us']) for x in v):.1f} µs sys {st.median(float(x['sys_us']) for x in v):.1f} µs")
PY
