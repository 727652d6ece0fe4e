#!/bin/bash
# Installs PyPI `vllm-router` (pinned) into a venv outside the repository, once per machine:
# a second run with the same version only prints the executable's path.
# Usage: install-vllm-router.sh        → prints the path of the `vllm-router` executable.
# Env: VLLM_ROUTER_VERSION (0.1.17), PDGATE_CACHE (~/.cache/pdgate): the venv is
# $PDGATE_CACHE/vllm-router-$VLLM_ROUTER_VERSION.
set -eu
VERSION=${VLLM_ROUTER_VERSION:-0.1.17}
CACHE=${PDGATE_CACHE:-$HOME/.cache/pdgate}
VENV=$CACHE/vllm-router-$VERSION
EXE=$VENV/bin/vllm-router
if [ -x "$EXE" ] && [ -f "$VENV/.installed" ]; then echo "$EXE"; exit 0; fi
PY=${PYTHON:-python3}
"$PY" -c 'import sys; assert sys.version_info >= (3, 9), sys.version' >&2
rm -rf "$VENV"; mkdir -p "$CACHE"
"$PY" -m venv "$VENV" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check "vllm-router==$VERSION" >&2
[ -x "$EXE" ] || { echo "vllm-router $VERSION installed no vllm-router executable" >&2; exit 1; }
"$EXE" --help >/dev/null 2>&1 || { echo "$EXE --help failed" >&2; "$EXE" --help >&2; exit 1; }
touch "$VENV/.installed"
echo "$EXE"
