#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test tilec.
# Idempotent and quiet when everything is already there.
set -euo pipefail

APT_PACKAGES=(llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools clang-22 lld-22
              cmake ninja-build libgtest-dev)
PIP_PACKAGES=(pybind11 numpy pytest nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  if ! apt-cache policy llvm-22-dev 2>/dev/null | grep -q 'Candidate:.*[0-9]'; then
    # LLVM 22 comes from apt.llvm.org on stock Debian 12.
    $SUDO apt-get update -qq
    if ! apt-cache policy llvm-22-dev 2>/dev/null | grep -q 'Candidate:.*[0-9]'; then
      $SUDO apt-get install -y -qq wget gnupg ca-certificates >/dev/null
      wget -qO- https://apt.llvm.org/llvm-snapshot.gpg.key | $SUDO tee /etc/apt/trusted.gpg.d/apt.llvm.org.asc >/dev/null
      echo "deb http://apt.llvm.org/bookworm/ llvm-toolchain-bookworm-22 main" | $SUDO tee /etc/apt/sources.list.d/llvm-22.list >/dev/null
      $SUDO apt-get update -qq
    fi
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

pip_missing=()
for pkg in "${PIP_PACKAGES[@]}"; do
  python3 -m pip show -q "$pkg" >/dev/null 2>&1 || pip_missing+=("$pkg")
done
if ((${#pip_missing[@]})); then
  echo "setup: pip installing ${pip_missing[*]}"
  python3 -m pip install -q "${pip_missing[@]}"
fi

[ -x /usr/local/cuda/bin/ptxas ] || echo "setup: note: no CUDA toolkit at /usr/local/cuda; cubin/ptxas tests will be skipped"
exit 0
