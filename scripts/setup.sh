#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test tilec, from
# the machine's configured package sources only (Debian 12 ships LLVM/MLIR 22
# in bookworm's archive; no outside apt source is ever added).
# Idempotent and quiet when everything is already there.
#
#   scripts/setup.sh           install what is missing
#   scripts/setup.sh --plan    print what would be installed, one line per
#                              package ("apt NAME" / "pip NAME"), and exit 0;
#                              nothing is installed (test/lint/setup-plan.test)
#
# Why no `cmd | grep -q` anywhere: under `set -o pipefail`, grep -q exits at
# its first match, the writer dies of SIGPIPE and the pipeline returns 141 —
# the old detection concluded "no candidate" on machines that had one. Every
# query below captures the command's output into a variable first and matches
# it with bash.
set -euo pipefail

APT_PACKAGES=(llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools clang-22 lld-22
              cmake ninja-build libgtest-dev)
# transformers (~45 MB with its dependencies, ~20 s): the attn_implementation="tilec" tests.
PIP_PACKAGES=(pybind11 numpy pytest nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm torch transformers)

plan=0
case "${1:-}" in
  --plan) plan=1 ;;
  "") ;;
  *) echo "setup: unknown argument '$1' (use --plan to list what would be installed)" >&2; exit 2 ;;
esac

apt_installed() {  # dpkg's own status for one package
  local status
  status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
  [[ "$status" == "install ok installed" ]]
}

apt_candidate() {  # does a configured source offer this package?
  local policy
  policy=$(apt-cache policy "$1" 2>/dev/null) || return 1
  [[ "$policy" =~ Candidate:\ *[0-9] ]]
}

pip_installed() {
  python3 -m pip show -q "$1" >/dev/null 2>&1
}

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  apt_installed "$pkg" || missing+=("$pkg")
done
pip_missing=()
for pkg in "${PIP_PACKAGES[@]}"; do
  pip_installed "$pkg" || pip_missing+=("$pkg")
done

if ((plan)); then
  for pkg in ${missing[@]+"${missing[@]}"}; do echo "apt $pkg"; done
  for pkg in ${pip_missing[@]+"${pip_missing[@]}"}; do echo "pip $pkg"; done
  exit 0
fi

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  unavailable=()
  for pkg in "${missing[@]}"; do apt_candidate "$pkg" || unavailable+=("$pkg"); done
  if ((${#unavailable[@]})); then
    # The package lists may be stale or empty on a fresh image.
    $SUDO apt-get update -qq
    still=()
    for pkg in "${unavailable[@]}"; do apt_candidate "$pkg" || still+=("$pkg"); done
    if ((${#still[@]})); then
      echo "setup: no configured apt source offers: ${still[*]}" >&2
      echo "setup: tilec needs LLVM/MLIR 22 as Debian packages (Debian 12 bookworm ships them)." >&2
      echo "setup: add a source that provides them (or install them by hand), then run this again." >&2
      exit 3
    fi
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ((${#pip_missing[@]})); then
  echo "setup: pip installing ${pip_missing[*]}"
  python3 -m pip install -q "${pip_missing[@]}"
fi

[ -x /usr/local/cuda/bin/ptxas ] || echo "setup: note: no CUDA toolkit at /usr/local/cuda; cubin/ptxas tests will be skipped"
exit 0
