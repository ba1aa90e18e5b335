//===- Driver.cpp - The CUDA driver API, resolved at run time -------------===//

#include "Driver.h"

#include "tilec/runtime/Runtime.h"

#include <dlfcn.h>
#include <memory>

namespace tilec::runtime::detail {
namespace {

struct LoadResult {
  std::unique_ptr<Driver> driver;
  std::string failure;
};

template <typename Fn>
bool resolve(void *lib, const char *symbol, Fn &fn, std::string &failure) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (!fn) {
    const char *err = dlerror();
    failure = std::string("CUDA driver libcuda.so.1 lacks ") + symbol + ": " +
              (err ? err : "symbol not found");
  }
  return fn != nullptr;
}

LoadResult loadDriver() {
  LoadResult r;
  // RTLD_LOCAL: the symbols are only reached through this table. If the
  // process already has libcuda loaded (e.g. through torch), dlopen returns
  // that same instance, so both share contexts and memory.
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *err = dlerror();
    r.failure = std::string("no CUDA driver: dlopen(libcuda.so.1) failed: ") +
                (err ? err : "unknown error");
    return r;
  }
  auto d = std::make_unique<Driver>();
  std::string &f = r.failure;
  // The plain names are the current ABI of every entry used here (none of
  // them has a _v2 successor), so dlsym suffices; cuGetProcAddress is only
  // needed for versioned entry points.
  bool ok = resolve(lib, "cuGetErrorName", d->getErrorName, f) &&
            resolve(lib, "cuGetErrorString", d->getErrorString, f) &&
            resolve(lib, "cuInit", d->init, f) &&
            resolve(lib, "cuDeviceGet", d->deviceGet, f) &&
            resolve(lib, "cuDeviceGetAttribute", d->deviceGetAttribute, f) &&
            resolve(lib, "cuDevicePrimaryCtxRetain",
                    d->devicePrimaryCtxRetain, f) &&
            resolve(lib, "cuCtxGetCurrent", d->ctxGetCurrent, f) &&
            resolve(lib, "cuCtxSetCurrent", d->ctxSetCurrent, f) &&
            resolve(lib, "cuCtxGetDevice", d->ctxGetDevice, f) &&
            resolve(lib, "cuPointerGetAttribute", d->pointerGetAttribute,
                    f) &&
            resolve(lib, "cuModuleLoadDataEx", d->moduleLoadDataEx, f) &&
            resolve(lib, "cuModuleGetFunction", d->moduleGetFunction, f) &&
            resolve(lib, "cuFuncSetAttribute", d->funcSetAttribute, f) &&
            resolve(lib, "cuLaunchKernel", d->launchKernel, f);
  if (!ok)
    return r;
  d->ctxGetId =
      reinterpret_cast<decltype(d->ctxGetId)>(dlsym(lib, "cuCtxGetId"));
  d->launchKernelEx = reinterpret_cast<decltype(d->launchKernelEx)>(
      dlsym(lib, "cuLaunchKernelEx"));
  CUresult res = d->init(0);
  if (res != CUDA_SUCCESS) {
    r.failure = "no usable CUDA driver: cuInit failed: " + d->describe(res);
    return r;
  }
  r.driver = std::move(d);
  return r;
}

const LoadResult &loaded() {
  static const LoadResult result = loadDriver();
  return result;
}

} // namespace

const Driver &Driver::get() {
  const LoadResult &r = loaded();
  if (!r.driver)
    throw Error(Error::Kind::Driver, r.failure);
  return *r.driver;
}

const std::string &Driver::failure() { return loaded().failure; }

std::string Driver::describe(CUresult result) const {
  const char *name = nullptr, *text = nullptr;
  if (getErrorName(result, &name) != CUDA_SUCCESS || !name)
    return "CUDA error " + std::to_string(static_cast<int>(result));
  std::string s = name;
  if (getErrorString(result, &text) == CUDA_SUCCESS && text)
    s += std::string(" (") + text + ")";
  return s;
}

void Driver::check(CUresult result, const char *call,
                   const std::string &detail) const {
  if (result != CUDA_SUCCESS)
    throw Error(Error::Kind::Driver,
                std::string(call) + " failed: " + describe(result) + detail);
}

} // namespace tilec::runtime::detail

namespace tilec::runtime {

bool driverAvailable(std::string *reason) {
  const std::string &failure = detail::Driver::failure();
  if (reason)
    *reason = failure;
  return failure.empty();
}

} // namespace tilec::runtime
