/* A stand-in libcuda.so.1 for testing the tilec runtime on machines without
 * a GPU. test_runtime.py compiles it, puts it first on LD_LIBRARY_PATH of a
 * subprocess and reads the calls it logs to $FAKE_CUDA_LOG, one per line.
 *
 * It models just what the runtime relies on: one device (sm_90, 232448 bytes
 * of opt-in shared memory), a primary context, contexts owning pointers at or
 * above 0x1000, and one-kernel modules:
 *   - PTX: text with ".entry NAME(.param .TYPE ..., ...)"; the text
 *     "SYNTAX_ERROR" makes the JIT fail with a log;
 *   - cubin: "\x7fELF" followed by PTX-like text; it loads only when the text
 *     contains "arch=sm_90", else CUDA_ERROR_NO_BINARY_FOR_GPU.
 * A launch logs the kernel, its configuration and each parameter's bytes,
 * sized by the .param types, as the real driver reads them (cuLaunchKernelEx
 * also its launch attributes).
 * $FAKE_CUDA_INIT_ERROR makes cuInit return that error code.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum {
  SUCCESS = 0,
  INVALID_VALUE = 1,
  NO_DEVICE = 100,
  INVALID_DEVICE = 101,
  INVALID_CONTEXT = 201,
  NO_BINARY_FOR_GPU = 209,
  INVALID_PTX = 218,
  NOT_FOUND = 500,
};
enum { OPTIN_SHARED = 232448, DEFAULT_SHARED = 48 * 1024 };

typedef struct {
  char name[128];
  int nparams;
  int sizes[64];
  int maxDynamicShared;
} Module; /* also its one function */

static int primaryContext;
static void *current;

static void logCall(const char *fmt, ...) {
  const char *path = getenv("FAKE_CUDA_LOG");
  if (!path)
    return;
  FILE *f = fopen(path, "a");
  if (!f)
    return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

CUresult cuGetErrorName(CUresult e, const char **s) {
  switch (e) {
  case SUCCESS: *s = "CUDA_SUCCESS"; return SUCCESS;
  case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return SUCCESS;
  case NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return SUCCESS;
  case INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; return SUCCESS;
  case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return SUCCESS;
  case NO_BINARY_FOR_GPU: *s = "CUDA_ERROR_NO_BINARY_FOR_GPU"; return SUCCESS;
  case INVALID_PTX: *s = "CUDA_ERROR_INVALID_PTX"; return SUCCESS;
  case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return SUCCESS;
  }
  *s = NULL;
  return INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
  switch (e) {
  case NO_DEVICE: *s = "no CUDA-capable device is detected"; return SUCCESS;
  case NO_BINARY_FOR_GPU: *s = "no kernel image is available for execution on the device"; return SUCCESS;
  case INVALID_PTX: *s = "a PTX JIT compilation failed"; return SUCCESS;
  case NOT_FOUND: *s = "named symbol not found"; return SUCCESS;
  case INVALID_VALUE: *s = "invalid argument"; return SUCCESS;
  case INVALID_CONTEXT: *s = "invalid device context"; return SUCCESS;
  }
  return cuGetErrorName(e, s);
}

CUresult cuInit(unsigned flags) {
  (void)flags;
  const char *err = getenv("FAKE_CUDA_INIT_ERROR");
  logCall("cuInit");
  return err ? atoi(err) : SUCCESS;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
  if (ordinal != 0)
    return INVALID_DEVICE;
  *dev = 0;
  return SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attr, int dev) {
  (void)dev;
  switch (attr) {
  case 75: *value = 9; return SUCCESS;   /* compute capability major */
  case 76: *value = 0; return SUCCESS;   /* compute capability minor */
  case 97: *value = OPTIN_SHARED; return SUCCESS;
  }
  return INVALID_VALUE;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  (void)dev;
  logCall("cuDevicePrimaryCtxRetain");
  *ctx = &primaryContext;
  return SUCCESS;
}

CUresult cuCtxGetCurrent(void **ctx) {
  *ctx = current;
  return SUCCESS;
}

CUresult cuCtxSetCurrent(void *ctx) {
  logCall("cuCtxSetCurrent");
  current = ctx;
  return SUCCESS;
}

CUresult cuCtxGetDevice(int *dev) {
  if (!current)
    return INVALID_CONTEXT;
  *dev = 0;
  return SUCCESS;
}

CUresult cuCtxGetId(void *ctx, unsigned long long *id) {
  (void)ctx;
  *id = 42;
  return SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, int attr, unsigned long long ptr) {
  if (attr != 1 || ptr < 0x1000)
    return INVALID_VALUE;
  *(void **)data = &primaryContext;
  return SUCCESS;
}

/* Reads ".entry NAME(" and the sizes of the ".param .TYPE" that follow. */
static int parseEntry(const char *text, Module *m) {
  const char *p = strstr(text, ".entry ");
  if (!p)
    return 0;
  p += strlen(".entry ");
  size_t n = strcspn(p, "( \n");
  if (n >= sizeof m->name)
    return 0;
  memcpy(m->name, p, n);
  m->name[n] = '\0';
  const char *end = strchr(p, ')');
  for (p = strstr(p, ".param ."); p && (!end || p < end);
       p = strstr(p, ".param .")) {
    p += strlen(".param .");
    int bits = atoi(p + 1); /* u64 -> 64, f32 -> 32, ... */
    m->sizes[m->nparams++] = bits / 8;
  }
  return 1;
}

CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned n,
                            int *options, void **values) {
  char *logBuffer = NULL;
  size_t logSize = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == 5)
      logBuffer = (char *)values[i];
    if (options[i] == 6)
      logSize = (size_t)(uintptr_t)values[i];
  }
  if (!current)
    return INVALID_CONTEXT;
  const char *text = (const char *)image;
  int cubin = memcmp(text, "\x7f" "ELF", 4) == 0;
  if (cubin) {
    text += 4;
    logCall("load cubin");
    if (!strstr(text, "arch=sm_90"))
      return NO_BINARY_FOR_GPU;
  } else {
    logCall("load ptx");
    if (strstr(text, "SYNTAX_ERROR")) {
      if (logBuffer && logSize)
        snprintf(logBuffer, logSize,
                 "ptxas application ptx input, line 1; fatal   : Parsing "
                 "error near 'SYNTAX_ERROR'");
      return INVALID_PTX;
    }
  }
  Module *m = calloc(1, sizeof *m);
  if (!parseEntry(text, m)) {
    free(m);
    return INVALID_PTX;
  }
  m->maxDynamicShared = DEFAULT_SHARED;
  *module = m;
  return SUCCESS;
}

CUresult cuModuleGetFunction(void **fn, void *module, const char *name) {
  Module *m = module;
  if (strcmp(m->name, name) != 0)
    return NOT_FOUND;
  *fn = m;
  return SUCCESS;
}

CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
  Module *m = fn;
  logCall("cuFuncSetAttribute %d %d", attr, value);
  if (attr != 8 || value > OPTIN_SHARED)
    return INVALID_VALUE;
  m->maxDynamicShared = value;
  return SUCCESS;
}

static CUresult launchAs(const char *what, void *fn, unsigned gx, unsigned gy,
                         unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned shared, void *stream, void **params) {
  Module *m = fn;
  if ((int)shared > m->maxDynamicShared)
    return INVALID_VALUE;
  /* Not logging: return before formatting, so that host-time benchmarks
   * (bench/host_overhead.py --mock) time the runtime, not this printf. */
  if (!getenv("FAKE_CUDA_LOG"))
    return SUCCESS;
  char args[2048] = "";
  size_t len = 0;
  for (int i = 0; i < m->nparams; ++i) {
    unsigned long long v = 0;
    memcpy(&v, params[i], (size_t)m->sizes[i]);
    len += (size_t)snprintf(args + len, sizeof args - len, " %d:0x%llx",
                            m->sizes[i], v);
  }
  logCall("%s %s grid=%u,%u,%u block=%u,%u,%u shared=%u stream=0x%llx "
          "params%s",
          what, m->name, gx, gy, gz, bx, by, bz, shared,
          (unsigned long long)(uintptr_t)stream, args);
  return SUCCESS;
}

CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shared,
                        void *stream, void **params, void **extra) {
  (void)extra;
  return launchAs("launch", fn, gx, gy, gz, bx, by, bz, shared, stream, params);
}

/* cuLaunchKernelEx: cuda.h's CUlaunchConfig and CUlaunchAttribute layouts.
 * Logs "launch" with " attr=ID:VALUE" per attribute (the value's first int). */
typedef struct {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int i;
  } value;
} FakeLaunchAttribute;
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, shared;
  void *stream;
  FakeLaunchAttribute *attrs;
  unsigned numAttrs;
} FakeLaunchConfig;

CUresult cuLaunchKernelEx(const FakeLaunchConfig *c, void *fn, void **params,
                          void **extra) {
  (void)extra;
  char what[256] = "launch";
  size_t len = strlen(what);
  for (unsigned i = 0; i < c->numAttrs; ++i)
    len += (size_t)snprintf(what + len, sizeof what - len, " attr=%d:%d",
                            c->attrs[i].id, c->attrs[i].value.i);
  return launchAs(what, fn, c->gx, c->gy, c->gz, c->bx, c->by, c->bz,
                  c->shared, c->stream, params);
}
