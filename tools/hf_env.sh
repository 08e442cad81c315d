#!/usr/bin/env bash
# hf_env.sh — makes (once) the Python environment of tools/prepare_hf and tests/test_hf.sh: a virtual environment,
# build/hfenv (or $RINGLM_HFENV), that sees the system's site packages (Debian's python3-torch 1.13, python3-h5py,
# python3-numpy) and adds from PyPI transformers 4.46.3 — the newest release that works with PyTorch 1.13 — with
# the dependencies it pulls in, among them tokenizers (0.20) and safetensors (Debian 12 packages neither).
# tools/hf_export and tools/hf_import need only h5py and numpy; tools/prepare_hf needs tokenizers.
# Prints the environment's python on stdout. On failure: one line on stderr, exit status 2 when PyPI cannot be
# reached, 1 otherwise. Nothing is downloaded once the environment is complete.
set -u
cd "$(dirname "$0")/.."
ENV=${RINGLM_HFENV:-build/hfenv}
case $ENV in /*) ;; *) ENV=$PWD/$ENV ;; esac
PIN=transformers==4.46.3
PY=$ENV/bin/python
ready() {   # the stamp of a completed install, and the packages still findable (without the seconds an import takes)
  [ -f "$ENV/.ringlm-$PIN" ] && "$PY" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("transformers", "tokenizers", "safetensors", "torch")))' 2>/dev/null; }
if ready; then echo "$PY"; exit 0; fi
mkdir -p "$(dirname "$ENV")" || { echo "hf_env: cannot create $(dirname "$ENV")" >&2; exit 1; }
exec 9>"$ENV.lock"; flock 9                         # one installer at a time
if ready; then echo "$PY"; exit 0; fi
if [ ! -x "$PY" ]; then
  out=$(/usr/bin/python3 -m venv --system-site-packages "$ENV" 2>&1) || {
    rm -rf "$ENV"
    echo "hf_env: cannot create the virtual environment $ENV (is python3-venv installed? tools/install_deps.sh installs it): $(echo "$out" | tail -n 1)" >&2
    exit 1; }
fi
out=$("$PY" -m pip install --disable-pip-version-check --no-input -q --retries 1 --timeout 20 "$PIN" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  if echo "$out" | grep -qE 'from versions: none|NewConnectionError|Failed to establish|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|ReadTimeout|ProxyError|SSLError'; then
    echo "hf_env: PyPI is not reachable: cannot install $PIN into $ENV" >&2; exit 2
  fi
  echo "hf_env: pip install $PIN into $ENV failed: $(echo "$out" | grep -m1 -E '^ERROR' || echo "$out" | tail -n 1)" >&2
  exit 1
fi
"$PY" -c 'import transformers, tokenizers, safetensors' 2>/dev/null || {
  echo "hf_env: $PIN installed into $ENV but 'import transformers, tokenizers, safetensors' fails" >&2; exit 1; }
touch "$ENV/.ringlm-$PIN"
echo "$PY"
