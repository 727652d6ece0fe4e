#!/usr/bin/env python3
"""Fast fake vLLM engine for tools/pd-stream-overhead.sh (standard library only).

Usage: pd-fake-engine.py PORT [CHUNKS]

- GET /v1/models, /metrics (vLLM gauge names), /health.
- POST /v1/completions or /v1/chat/completions:
  - body with kv_transfer_params.do_remote_decode = true (a prefill leg): a one-token answer
    carrying kv_transfer_params at the top level;
  - "stream": true: CHUNKS (200) SSE chunks of one token, then data: [DONE], chunked encoding;
  - otherwise a one-token completion.
HTTP/1.1 keep-alive, one thread per connection.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
CHUNKS = int(sys.argv[2]) if len(sys.argv) > 2 else 200
MODELS = b'{"object":"list","data":[{"id":"m","object":"model","owned_by":"bench"}]}'
METRICS = (
    b'vllm:num_requests_running{engine="0",model_name="m"} 0\n'
    b'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
    b'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0\n'
)
USAGE = {"prompt_tokens": 500, "completion_tokens": 1, "total_tokens": 501}
KV = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_engine_id": "fake-prefill",
    "remote_block_ids": [0, 1, 2],
    "remote_host": "127.0.0.1",
    "remote_port": PORT,
    "remote_request_id": "lease-1",
    "tp_size": 1,
}
CHUNK = (
    'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m",'
    '"choices":[{"index":0,"text":" ok","finish_reason":null,"logprobs":null}]}\n\n'
).encode()
CHUNK_FRAME = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK)
DONE = b"data: [DONE]\n\n"
DONE_FRAME = b"%x\r\n%s\r\n0\r\n\r\n" % (len(DONE), DONE)


def completion(kv=None):
    body = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": " ok", "finish_reason": "length", "logprobs": None}],
        "usage": USAGE,
    }
    if kv is not None:
        body["kv_transfer_params"] = kv
    return json.dumps(body).encode()


PLAIN = completion()
PREFILL = completion(KV)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, body, ctype="application/json"):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(MODELS)
        elif self.path == "/metrics":
            self.reply(METRICS, "text/plain")
        else:
            self.reply(b"")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        try:
            req = json.loads(raw)
        except ValueError:
            req = {}
        kv = req.get("kv_transfer_params") or {}
        if kv.get("do_remote_decode"):
            self.reply(PREFILL)
        elif req.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            for _ in range(CHUNKS):
                self.wfile.write(CHUNK_FRAME)
                self.wfile.flush()
            self.wfile.write(DONE_FRAME)
            self.wfile.flush()
        else:
            self.reply(PLAIN)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


if __name__ == "__main__":
    Server(("127.0.0.1", PORT), Handler).serve_forever()
