#!/usr/bin/env bash
# Builds a relocatable tilec CLI for GPU hosts that have no LLVM/MLIR:
#
#   build/bundle/tilec-bundle.tar.xz    what travels (carry build/bundle)
#   build/tilec-bundle/bin/tilec        the same, unpacked (where the Python
#                                       package and bench/gpu.sh look for it)
#
# bin/tilec is build/'s tilec linked again, against LLVM's and MLIR's static
# archives (/usr/lib/llvm-22/lib/lib{LLVM,MLIR}*.a: the linker takes only the
# members it needs, --gc-sections drops the rest), zlib's archive, libstdc++
# and libgcc, and stripped; it needs only glibc (GLIBC_2.35 symbols at most)
# and, for cubins, ptxas at run time (found as lib/Target/Ptxas.cpp says:
# $TILEC_PTXAS, $CUDA_HOME/bin, /usr/local/cuda/bin, PATH). tilec's own
# objects and archives are build/'s, compiled the same for both links; one
# static copy of LLVM registers its options once, so the libLLVM.so/static
# MLIR clash (CMakeLists.txt's MLIR_LINK_MLIR_DYLIB) does not arise.
#
# Checks (fails if one does not hold): only libc/libm/ld-linux are NEEDED, no
# GLIBC_ symbol is newer than $TILEC_BUNDLE_MAX_GLIBC (2.35), and a copy in a
# temporary folder, run with an empty environment and (where unshare works)
# with /usr/lib/llvm-22 and libLLVM/libMLIR hidden, prints the same PTX as
# build/bin/tilec for kernels/flash_fwd.mlir and writes a cubin.
#
# Usage: scripts/bundle.sh           (about 1 minute here, most of it xz)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TILEC_BUILD_DIR:-build}
LLVM_LIB=${TILEC_LLVM_LIB:-/usr/lib/llvm-22/lib}
MAX_GLIBC=${TILEC_BUNDLE_MAX_GLIBC:-2.35}
CXX=${CXX:-/usr/lib/llvm-22/bin/clang++}
CC=${CC:-/usr/lib/llvm-22/bin/clang}
ZLIB_A=${TILEC_ZLIB_A:-/usr/lib/x86_64-linux-gnu/libz.a}
TREE=$BUILD_DIR/tilec-bundle
DIST=$BUILD_DIR/bundle

scripts/build.sh tilec >/dev/null

# build/'s own link line for bin/tilec names the objects and tilec archives.
inputs=()
for tok in $(ninja -C "$BUILD_DIR" -t commands bin/tilec | tail -1); do
  case $tok in
    *.o|*.a) [[ $tok = /* ]] && inputs+=("$tok") || inputs+=("$BUILD_DIR/$tok") ;;
  esac
done
[ ${#inputs[@]} -gt 1 ] || { echo "bundle: cannot read bin/tilec's link line from $BUILD_DIR" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$CC" -O2 -c scripts/bundle_compat.c -o "$work/compat.o"
rm -rf "$TREE" && mkdir -p "$TREE/bin" "$DIST"
"$CXX" -O3 -fuse-ld=lld -Wl,--gc-sections -Wl,--as-needed -Wl,--build-id=sha1 -s \
  -static-libstdc++ -static-libgcc \
  "${inputs[@]}" "$work/compat.o" "$LLVM_LIB"/libMLIR*.a "$LLVM_LIB"/libLLVM*.a "$ZLIB_A" \
  -lpthread -ldl -lrt -lm -o "$TREE/bin/tilec"

needed=$(readelf -d "$TREE/bin/tilec" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | xargs)
for lib in $needed; do
  case $lib in
    libc.so.6|libm.so.6|ld-linux-x86-64.so.2|libpthread.so.0|libdl.so.2|librt.so.1) ;;
    *) echo "bundle: bin/tilec needs $lib (only glibc is allowed)" >&2; exit 1 ;;
  esac
done
glibc=$(objdump -T "$TREE/bin/tilec" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
if [ "$(printf '%s\n%s\n' "$glibc" "$MAX_GLIBC" | sort -V | tail -1)" != "$MAX_GLIBC" ]; then
  echo "bundle: bin/tilec needs GLIBC_$glibc, newer than GLIBC_$MAX_GLIBC:" >&2
  objdump -T "$TREE/bin/tilec" | grep "GLIBC_$glibc" >&2
  exit 1
fi
version=$("$TREE/bin/tilec" --version)
cat > "$TREE/README" <<EOF
$version, relocatable: bin/tilec needs glibc >= $glibc (NEEDED: $needed) and,
for cubins, ptxas (\$TILEC_PTXAS, \$CUDA_HOME/bin, /usr/local/cuda/bin or PATH).
Made by scripts/bundle.sh from commit $(git rev-parse --short HEAD 2>/dev/null || echo '?').
The Python package runs it when its _tilec extension is missing:
TILEC_CLI=<this folder>/bin/tilec, or unpack this folder as <repo>/build/tilec-bundle
(bench/gpu.sh does that).
EOF

# The foreign-host check: a copy elsewhere, an empty environment, and LLVM's
# libraries out of sight.
cp "$TREE/bin/tilec" "$work/tilec"
cp kernels/flash_fwd.mlir "$work/k.mlir"
"$BUILD_DIR/bin/tilec" --arch=sm_80 --emit=ptx kernels/flash_fwd.mlir > "$work/want.ptx"
check='cd "$0" && env -i ./tilec --version >/dev/null &&
  env -i ./tilec --arch=sm_80 --emit=ptx k.mlir > got.ptx && cmp -s got.ptx want.ptx &&
  if [ -x /usr/local/cuda/bin/ptxas ]; then
    env -i ./tilec --arch=sm_80 k.mlir -o out && test -s out/flash_fwd.cubin; fi'
hide='mount -t tmpfs none /usr/lib/llvm-22 &&
  for f in /usr/lib/x86_64-linux-gnu/libLLVM*.so* /usr/lib/x86_64-linux-gnu/libMLIR*.so*; do
    [ -e "$f" ] && mount --bind /dev/null "$f"; done; '
if unshare -rm true 2>/dev/null; then
  unshare -rm sh -c "$hide $check" "$work" || { echo "bundle: the copy failed with LLVM hidden" >&2; exit 1; }
  where="copied, empty environment, /usr/lib/llvm-22 and libLLVM/libMLIR hidden"
else
  sh -c "$check" "$work" || { echo "bundle: the copy failed" >&2; exit 1; }
  where="copied, empty environment (unshare unavailable: LLVM left visible)"
fi

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$BUILD_DIR" -cf - tilec-bundle |
  xz -9 -T2 > "$DIST/tilec-bundle.tar.xz.tmp"
mv "$DIST/tilec-bundle.tar.xz.tmp" "$DIST/tilec-bundle.tar.xz"
echo "bundle: $DIST/tilec-bundle.tar.xz ($(du -m "$DIST/tilec-bundle.tar.xz" | cut -f1) MB;" \
  "bin/tilec $(du -m "$TREE/bin/tilec" | cut -f1) MB), $version, needs GLIBC_$glibc," \
  "NEEDED: $needed; checked: $where"
