//===- Driver.h - The CUDA driver API, resolved at run time ---------------===//
//
// libcuda.so.1 is opened with dlopen on first use and never closed, and the
// entry points the runtime needs are looked up with dlsym. The outcome is
// computed once per process: either a table of function pointers or the
// reason the driver is unusable.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_LIB_RUNTIME_DRIVER_H
#define TILEC_LIB_RUNTIME_DRIVER_H

#include "CudaApi.h"

#include <string>

namespace tilec::runtime::detail {

struct Driver {
  decltype(&::cuGetErrorName) getErrorName;
  decltype(&::cuGetErrorString) getErrorString;
  decltype(&::cuInit) init;
  decltype(&::cuDeviceGet) deviceGet;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute;
  decltype(&::cuDevicePrimaryCtxRetain) devicePrimaryCtxRetain;
  decltype(&::cuCtxGetCurrent) ctxGetCurrent;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent;
  decltype(&::cuCtxGetDevice) ctxGetDevice;
  /// CUDA >= 12.0; null on older drivers, where the context handle itself
  /// serves as the id.
  decltype(&::cuCtxGetId) ctxGetId;
  decltype(&::cuPointerGetAttribute) pointerGetAttribute;
  decltype(&::cuModuleLoadDataEx) moduleLoadDataEx;
  decltype(&::cuModuleGetFunction) moduleGetFunction;
  decltype(&::cuFuncSetAttribute) funcSetAttribute;
  decltype(&::cuLaunchKernel) launchKernel;
  /// CUDA >= 11.8; null on older drivers, where kernels marked
  /// "programmatic_launch" are launched in plain stream order (their wait
  /// then returns at once).
  decltype(&::cuLaunchKernelEx) launchKernelEx;

  /// The driver, loaded and initialized (cuInit) on first call. Throws
  /// Error(Driver) saying why when that is impossible.
  static const Driver &get();
  /// The reason get() throws, or "" when the driver is usable.
  static const std::string &failure();

  /// "CUDA_ERROR_X (description)".
  std::string describe(CUresult result) const;
  /// Throws Error(Driver) "<call> failed: CUDA_ERROR_X (description)<detail>"
  /// unless `result` is CUDA_SUCCESS.
  void check(CUresult result, const char *call,
             const std::string &detail = {}) const;
};

} // namespace tilec::runtime::detail

#endif // TILEC_LIB_RUNTIME_DRIVER_H
