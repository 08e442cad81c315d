#!/usr/bin/env bash
# hf_env.sh — makes (once) the Python environment of tools/prepare_hf and tests/test_hf.sh: a virtual environment,
# build/hfenv (or $RINGLM_HFENV), that sees the system's site packages (Debian's python3-torch 1.13, python3-h5py,
# python3-numpy) and adds from PyPI transformers 4.46.3 — the newest release that works with PyTorch 1.13 — with
# the dependencies it pulls in, among them tokenizers (0.20) and safetensors (Debian 12 packages neither), and
# datasets 3.1.0 with pyarrow 18.1.0 and pandas 2.2.3 (tools/prepare_hf reads Parquet files and saved datasets with
# them). The system's numpy is held as it is (a constraint): pip would otherwise pull numpy 2 into the environment
# (for a newer pandas), which Debian's PyTorch 1.13, built against numpy 1, cannot use.
# tools/hf_export and tools/hf_import need only h5py and numpy; tools/prepare_hf and tools/train_tokenizer need
# tokenizers (and, for Parquet and datasets, pyarrow and datasets).
# PyTorch 1.13 under Python 3.11 cannot import torch.distributed.fsdp (a dataclass default that 3.11 refuses;
# PyTorch 2.0 fixed it), which transformers' model.generate() imports: the environment gets tools/setup/hf_torch_py311.py
# as site-packages/ringlm_torch_py311.py, imported at start-up by ringlm_torch_py311.pth, which compiles that one
# line of that one module as PyTorch 2.0 writes it (see the module). Every run checks it and installs or
# refreshes it when missing or stale, without a download (so an environment made before it gets it by running this
# again); the environment counts as complete only once generate()'s imports work.
# Prints the environment's python on stdout. On failure: one line on stderr, exit status 2 when PyPI cannot be
# reached, 1 otherwise. Nothing is downloaded once the environment is complete. A new environment is made in
# ENV.new.PID and renamed to ENV only once complete, so that ENV is never seen half-made (the wrappers use it as
# soon as it exists); an interrupted install leaves no ENV, and the next run starts over.
set -u
cd "$(dirname "$0")/../.."
ENV=${RINGLM_HFENV:-build/hfenv}
case $ENV in /*) ;; *) ENV=$PWD/$ENV ;; esac
PIN=transformers==4.46.3
EXTRA=(datasets==3.1.0 pyarrow==18.1.0 pandas==2.2.3)   # (the completion stamp keeps PIN's name: the wrappers test it)
PY=$ENV/bin/python
SHIM=tools/setup/hf_torch_py311.py
ready() {   # the stamp of a completed install, and the packages still findable (without the seconds an import takes)
  [ -f "$ENV/.ringlm-$PIN" ] && "$PY" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("transformers", "tokenizers", "safetensors", "torch", "datasets", "pyarrow")))' 2>/dev/null; }
site() { "$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' 2>/dev/null; }
shim_ok() {  # the start-up fix for PyTorch 1.13 under Python 3.11 is installed and current
  local s; s=$(site) && cmp -s "$SHIM" "$s/ringlm_torch_py311.py" && [ "$(cat "$s/ringlm_torch_py311.pth" 2>/dev/null)" = "import ringlm_torch_py311" ]; }
if ready && shim_ok; then echo "$PY"; exit 0; fi
mkdir -p "$(dirname "$ENV")" || { echo "hf_env: cannot create $(dirname "$ENV")" >&2; exit 1; }
exec 9>"$ENV.lock"; flock 9                         # one installer at a time
if ready && shim_ok; then echo "$PY"; exit 0; fi
# install_shim PYTHON: the start-up fix into that environment's site-packages
install_shim() {
  local site; site=$("$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' 2>/dev/null) && [ -d "$site" ] \
    || { echo "hf_env: cannot find the site-packages directory of $(dirname "$(dirname "$1")")" >&2; return 1; }
  cp "$SHIM" "$site/ringlm_torch_py311.py.tmp" && mv "$site/ringlm_torch_py311.py.tmp" "$site/ringlm_torch_py311.py" \
    && echo "import ringlm_torch_py311" > "$site/ringlm_torch_py311.pth" \
    || { echo "hf_env: cannot install $SHIM into $site" >&2; return 1; }
}
# gen_ok PYTHON: what generate() imports works (transformers.integrations.fsdp imports torch.distributed.fsdp)
gen_ok() {
  out=$("$1" -c 'import transformers, tokenizers, safetensors, torch, numpy, datasets, pyarrow.parquet
from transformers.integrations.fsdp import is_fsdp_managed_module
is_fsdp_managed_module(torch.nn.Linear(1, 1))
torch.from_numpy(numpy.zeros(2))' 2>&1) || {
    echo "hf_env: $PIN installed but importing transformers, tokenizers, safetensors, datasets, pyarrow and what model.generate() needs fails: $(echo "$out" | tail -n 1)" >&2
    return 1; }
}
if ready; then                                      # complete: only the shim is missing or stale (no pip, no download)
  install_shim "$PY" && gen_ok "$PY" || exit 1
  echo "$PY"; exit 0
fi
# A new environment is made in a temporary folder beside ENV and renamed to ENV only when it is complete (stamp
# included): the wrappers (tools/hf_export, ...) take ENV's python whenever ENV exists, so ENV must never be seen
# half-made. (A venv works from its new name: its python finds its prefix from pyvenv.cfg beside it; only the
# console scripts' #! lines keep the temporary path, and nothing here runs them.)
NEW="$ENV.new.$$"
rm -rf "$ENV".new.* 2>/dev/null                     # what an interrupted install left (under the lock: none runs)
trap 'rm -rf "$NEW"' EXIT
out=$(/usr/bin/python3 -m venv --system-site-packages "$NEW" 2>&1) || {
  echo "hf_env: cannot create the virtual environment $NEW (is python3-venv installed? tools/setup/install_deps.sh installs it): $(echo "$out" | tail -n 1)" >&2
  exit 1; }
# the system's numpy stays the environment's (see the top): a constraint file holding its version
np=$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)' 2>/dev/null) \
  || { echo "hf_env: the system python has no numpy (python3-numpy; tools/setup/install_deps.sh installs it)" >&2; exit 1; }
echo "numpy==$np" > "$NEW/constraints.txt"
out=$("$NEW/bin/python" -m pip install --disable-pip-version-check --no-input -q --retries 1 --timeout 20 \
      -c "$NEW/constraints.txt" "$PIN" "${EXTRA[@]}" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  if echo "$out" | grep -qE 'from versions: none|NewConnectionError|Failed to establish|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|ReadTimeout|ProxyError|SSLError|Connection refused'; then
    echo "hf_env: PyPI is not reachable: cannot install $PIN ${EXTRA[*]} into $ENV" >&2; exit 2
  fi
  echo "hf_env: pip install $PIN ${EXTRA[*]} into $ENV failed: $(echo "$out" | grep -m1 -E '^ERROR' || echo "$out" | tail -n 1)" >&2
  exit 1
fi
install_shim "$NEW/bin/python" && gen_ok "$NEW/bin/python" || exit 1
touch "$NEW/.ringlm-$PIN" || exit 1
# the swap: an older ENV (incomplete, or of another pin) aside, the new one in, the old one removed last
OLD="$ENV.old.$$"
if [ -e "$ENV" ]; then mv "$ENV" "$OLD" || { echo "hf_env: cannot move the old $ENV aside" >&2; exit 1; }; fi
mv "$NEW" "$ENV" || { echo "hf_env: cannot rename $NEW to $ENV" >&2; [ -e "$OLD" ] && mv "$OLD" "$ENV"; exit 1; }
trap - EXIT
rm -rf "$OLD"
ready || { echo "hf_env: $ENV is not usable after the rename" >&2; exit 1; }
echo "$PY"
