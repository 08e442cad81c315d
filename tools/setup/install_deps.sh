#!/usr/bin/env bash
# Installs the Debian packages ringlm needs when they are missing. As root it runs apt-get; otherwise it
# prints the exact command to run. (python3-venv: tools/setup/hf_env.sh puts transformers, tokenizers and safetensors from
# PyPI into a virtual environment for tools/prepare_hf and tests/test_hf.sh; Debian 12 packages none of them.
# zlib1g-dev: build/prepare reads gzip-compressed JSON Lines; iproute2: `ip netns` for tests/test_multihost.sh, which
# makes three hosts of network namespaces.)
set -euo pipefail
pkgs=(build-essential libopenblas-openmp-dev libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools zlib1g-dev
      python3 python3-venv python3-torch python3-h5py python3-numpy time procps iproute2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "ringlm: missing Debian packages: ${missing[*]}" >&2
  echo "ringlm: run as root: apt-get update && $cmd" >&2
  exit 1
fi
echo "ringlm: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
