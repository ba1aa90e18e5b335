/*===- bundle_compat.c - what the static tilec bundle links instead -------===*
 *
 * scripts/bundle.sh links bin/tilec against LLVM's and MLIR's static archives
 * so that it runs on a host with no LLVM. Two things those archives reference
 * are defined here instead of taken from the build host:
 *
 *  - ZSTD_*: LLVMSupport's Compression.cpp calls libzstd, which Debian ships
 *    only as a shared library. tilec never compresses or reads compressed
 *    sections, so these report an error ("not in the bundle").
 *  - arc4random: glibc >= 2.36 only; LLVM uses it for random numbers (temporary
 *    file names). Defined on getrandom() (glibc 2.25), so the bundle needs no
 *    symbol newer than GLIBC_2.35 (libgcc's _dl_find_object).
 *
 *===----------------------------------------------------------------------===*/
#include <stddef.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/types.h>

/* zstd's error codes are the last 120 or so size_t values. */
#define TILEC_ZSTD_ERROR ((size_t)-1)

void *ZSTD_createCCtx(void) { return NULL; }
size_t ZSTD_freeCCtx(void *cctx) { (void)cctx; return 0; }
size_t ZSTD_CCtx_setParameter(void *cctx, int param, int value) {
  (void)cctx; (void)param; (void)value;
  return TILEC_ZSTD_ERROR;
}
size_t ZSTD_compressBound(size_t size) { return size + (size >> 8) + 64; }
size_t ZSTD_compress2(void *cctx, void *dst, size_t dstCapacity, const void *src,
                      size_t srcSize) {
  (void)cctx; (void)dst; (void)dstCapacity; (void)src; (void)srcSize;
  return TILEC_ZSTD_ERROR;
}
size_t ZSTD_decompress(void *dst, size_t dstCapacity, const void *src, size_t srcSize) {
  (void)dst; (void)dstCapacity; (void)src; (void)srcSize;
  return TILEC_ZSTD_ERROR;
}
unsigned ZSTD_isError(size_t code) { return code > (size_t)-120; }
const char *ZSTD_getErrorName(size_t code) {
  (void)code;
  return "zstd is not in the tilec bundle";
}

uint32_t arc4random(void) {
  uint32_t value = 0;
  while (getrandom(&value, sizeof value, 0) != (ssize_t)sizeof value) {
  }
  return value;
}
