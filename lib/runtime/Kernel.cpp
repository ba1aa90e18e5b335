//===- Kernel.cpp - Module loading and kernel launch ----------------------===//

#include "Arch.h"
#include "Driver.h"
#include "ReadFile.h"
#include "tilec/runtime/Runtime.h"

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>

namespace tilec::runtime {

using detail::Driver;

namespace {

/// Dynamic shared memory a kernel may use without opting in.
constexpr uint32_t kDefaultMaxDynamicShared = 48 * 1024;

std::string dimString(const Dim3 &d) {
  return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " +
         std::to_string(d[2]) + ")";
}

/// "sm_90" for the current context's device, or "unknown".
std::string currentDeviceArch(const Driver &d) {
  CUdevice dev;
  int major = 0, minor = 0;
  if (d.ctxGetDevice(&dev) != CUDA_SUCCESS ||
      d.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                           dev) != CUDA_SUCCESS ||
      d.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                           dev) != CUDA_SUCCESS)
    return "unknown";
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

/// cuModuleLoadDataEx with the JIT error log captured into `log`.
CUresult loadImage(const Driver &d, const void *image, CUmodule &module,
                   std::string &log) {
  char buffer[16384] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {buffer, reinterpret_cast<void *>(sizeof(buffer))};
  CUresult r = d.moduleLoadDataEx(&module, image, 2, options, values);
  log.assign(buffer, strnlen(buffer, sizeof(buffer)));
  return r;
}

std::string withLog(const std::string &log) {
  return log.empty() ? "" : "\nJIT error log:\n" + log;
}

/// False when a cubin built for `arch` certainly cannot run on the device
/// `deviceArch` ("sm_90"): SASS runs only within one major version, on the
/// same or a newer minor, and arch-specific ("sm_90a") code only on that
/// exact chip. Skipping such a cubin up front avoids a failing driver call
/// (which compute-sanitizer reports as an error).
bool cubinMayRun(const std::string &arch, const std::string &deviceArch) {
  detail::SmArch image, device;
  if (!detail::parseSmArch(arch, image) || !detail::parseSmArch(deviceArch, device))
    return true; // unknown: let the driver decide
  if (image.specific)
    return image.major == device.major && image.minor == device.minor;
  return image.major == device.major && image.minor <= device.minor;
}

/// Loads the module in the current context, from the first image the device
/// can run in this order: a "sass" image built for exactly this device (when
/// the main cubin is not), the main cubin, another "sass" image the device
/// can run, else the PTX (JIT-compiled by the driver). `loaded` says which.
CUmodule loadModule(const Driver &d, const Manifest &m, const std::string &cubin,
                    const std::vector<std::string> &sass, const std::string &ptx,
                    std::string &loaded) {
  CUmodule module = nullptr;
  std::string log, cubinRejected;
  std::string deviceArch = currentDeviceArch(d);
  // These two mean "this image is not for this GPU": try the next one. Any
  // other failure (out of memory, a bad context) is reported as it is.
  auto wrongTarget = [](CUresult r) {
    return r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_SOURCE;
  };
  std::vector<bool> sassTried(m.sass.size(), false);
  auto trySass = [&](size_t i) {
    sassTried[i] = true;
    CUresult r = loadImage(d, sass[i].data(), module, log);
    if (r == CUDA_SUCCESS) {
      loaded = "cubin " + m.sass[i].arch;
      return true;
    }
    if (!wrongTarget(r))
      d.check(r, "cuModuleLoadDataEx",
              " loading cubin " + m.sass[i].cubinPath + " (" + m.sass[i].arch + ", device is " +
                  deviceArch + ")" + withLog(log));
    cubinRejected += "; the cubin " + m.sass[i].cubinPath + " (" + m.sass[i].arch +
                     ") was rejected: " + d.describe(r) + withLog(log);
    return false;
  };
  if (m.arch != deviceArch)
    for (size_t i = 0; i < m.sass.size(); ++i)
      if (m.sass[i].arch == deviceArch && trySass(i))
        return module;
  if (!cubin.empty() && (!m.ptxPath.empty() || !m.sass.empty()) &&
      !cubinMayRun(m.arch, deviceArch)) {
    cubinRejected += "; the cubin " + m.cubinPath + " is for " + m.arch + " and was not tried";
  } else if (!cubin.empty()) {
    CUresult r = loadImage(d, cubin.data(), module, log);
    if (r == CUDA_SUCCESS) {
      loaded = "cubin " + (m.arch.empty() ? std::string("(arch unstated)") : m.arch);
      return module;
    }
    if (!wrongTarget(r) || (m.ptxPath.empty() && m.sass.empty()))
      d.check(r, "cuModuleLoadDataEx",
              " loading cubin " + m.cubinPath + " (built for " +
                  (m.arch.empty() ? "an unstated arch" : m.arch) +
                  ", device is " + deviceArch + ")" +
                  (m.ptxPath.empty() ? "; the manifest names no PTX to JIT"
                                     : "") +
                  withLog(log));
    cubinRejected += "; the cubin " + m.cubinPath + " was rejected before: " +
                     d.describe(r);
  }
  for (size_t i = 0; i < m.sass.size(); ++i)
    if (!sassTried[i] && cubinMayRun(m.sass[i].arch, deviceArch) && trySass(i))
      return module;
  if (m.ptxPath.empty())
    throw Error(Error::Kind::Driver,
                "manifest " + m.path + ": no image runs on this " + deviceArch +
                    " device and no PTX to JIT" + cubinRejected);
  // The driver needs the PTX NUL-terminated; std::string guarantees that.
  CUresult r = loadImage(d, ptx.c_str(), module, log);
  d.check(r, "cuModuleLoadDataEx",
          " JIT-compiling PTX " + m.ptxPath + " for " + deviceArch +
              cubinRejected + withLog(log));
  loaded = "ptx (JIT for " + deviceArch + ")";
  return module;
}

/// Modules are shared by all kernels loaded from the same manifest and
/// images, per context, and live as long as the process (like the contexts
/// they belong to).
struct ModuleCache {
  std::mutex mutex;
  /// (module key, context id) -> the module and which image it came from.
  std::map<std::pair<std::string, uint64_t>, std::pair<CUmodule, std::string>> modules;
};

ModuleCache &moduleCache() {
  static ModuleCache cache;
  return cache;
}

/// Makes sure a context is current and returns it: the current one, else
/// the context that owns the first pointer argument, else the primary
/// context of device 0 (retained for the life of the process).
CUcontext ensureContext(const Driver &d, uint64_t firstPointer) {
  CUcontext ctx = nullptr;
  d.check(d.ctxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx)
    return ctx;
  // Fails for pointers the driver does not know; device 0 is then used.
  if (firstPointer &&
      d.pointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
                            static_cast<CUdeviceptr>(firstPointer)) != CUDA_SUCCESS)
    ctx = nullptr;
  if (!ctx) {
    CUdevice dev;
    d.check(d.deviceGet(&dev, 0), "cuDeviceGet", " for device 0");
    d.check(d.devicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain",
            " for device 0");
  }
  d.check(d.ctxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

/// $TILEC_PDL=0 launches kernels marked "programmatic_launch" in plain
/// stream order (for A/B timing; read once).
bool programmaticLaunchEnabled() {
  static const bool enabled = [] {
    const char *v = std::getenv("TILEC_PDL");
    return !(v && std::string(v) == "0");
  }();
  return enabled;
}

uint64_t contextId(const Driver &d, CUcontext ctx) {
  // Unlike handles, ids are never reused by a later context.
  if (!d.ctxGetId)
    return reinterpret_cast<uint64_t>(ctx);
  unsigned long long id = 0;
  d.check(d.ctxGetId(ctx, &id), "cuCtxGetId");
  return id;
}

/// A real as error messages print it: "%.9g" ("-0.5", "1e+39", "nan").
std::string realString(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

const char *argKindName(const KernelArg &a) {
  if (std::holds_alternative<DevicePtr>(a))
    return "a device pointer";
  if (std::holds_alternative<int64_t>(a))
    return "an integer";
  return "a real";
}

} // namespace

std::string describeArgument(const Param &param, size_t index) {
  std::string s = "argument '" + param.name + "' (param " +
                  std::to_string(index) + ", ";
  if (param.kind == ParamKind::Ptr)
    return s + "ptr to " + toString(param.elem) + ")";
  return s + toString(param.kind) + ")";
}

Kernel::Kernel(Manifest manifest, std::string cubin, std::vector<std::string> sass,
               std::string ptx, std::string moduleKey)
    : manifest_(std::move(manifest)), cubin_(std::move(cubin)), sass_(std::move(sass)),
      ptx_(std::move(ptx)), moduleKey_(std::move(moduleKey)) {}

std::string Kernel::loadedImage() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loadedImage_;
}

std::shared_ptr<Kernel> Kernel::load(const std::string &manifestPath) {
  Manifest m = loadManifest(manifestPath);
  auto readImage = [&](const std::string &path, const char *what) {
    std::string bytes, error;
    if (!path.empty() && !detail::readFile(path, bytes, error))
      throw Error(Error::Kind::Manifest, "manifest " + manifestPath + ": " +
                                             what + " " + path +
                                             ": cannot read: " + error);
    if (!path.empty() && bytes.empty())
      throw Error(Error::Kind::Manifest,
                  "manifest " + manifestPath + ": " + what + " " + path +
                      " is empty");
    return bytes;
  };
  std::string cubin = readImage(m.cubinPath, "cubin");
  std::vector<std::string> sass;
  for (const Manifest::Sass &image : m.sass)
    sass.push_back(readImage(image.cubinPath, "cubin"));
  std::string ptx = readImage(m.ptxPath, "ptx");
  Driver::get(); // a missing driver is reported here, not at first launch

  std::hash<std::string> hash;
  std::string key = std::filesystem::absolute(manifestPath).string() + "#" +
                    std::to_string(hash(cubin)) + "#" +
                    std::to_string(hash(ptx));
  for (const std::string &image : sass)
    key += "#" + std::to_string(hash(image));
  return std::shared_ptr<Kernel>(
      new Kernel(std::move(m), std::move(cubin), std::move(sass), std::move(ptx),
                 std::move(key)));
}

void Kernel::checkArgCount(size_t count) const {
  const std::vector<Param> &params = manifest_.params;
  if (count == params.size())
    return;
  std::string names;
  for (const Param &p : params)
    names += (names.empty() ? "" : ", ") + p.name;
  throw Error(Error::Kind::ArgType,
              "kernel '" + manifest_.kernel + "' takes " +
                  std::to_string(params.size()) + " arguments (" + names +
                  "), got " + std::to_string(count));
}

uint64_t Kernel::packArg(size_t i, const KernelArg &a) const {
  const Param &p = manifest_.params.at(i);
  auto wrongKind = [&](const char *expected) {
    return Error(Error::Kind::ArgType, describeArgument(p, i) + ": expected " +
                                           expected + ", got " + argKindName(a));
  };
  // The compiled code relies on tl.assume(x > 0) (p.positive).
  auto notPositive = [&](const std::string &value) {
    return Error(Error::Kind::ArgValue,
                 describeArgument(p, i) + ": must be > 0 (the kernel was "
                 "compiled with tl.assume(" + p.name + " > 0)), got " + value);
  };
  uint64_t slot = 0;
  switch (p.kind) {
  case ParamKind::Ptr: {
    const DevicePtr *ptr = std::get_if<DevicePtr>(&a);
    if (!ptr)
      throw wrongKind("a device pointer");
    if (p.align > 1 && ptr->address % uint64_t(p.align) != 0) {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)ptr->address);
      throw Error(Error::Kind::ArgValue,
                  describeArgument(p, i) + ": the kernel reads or writes it " +
                      std::to_string(p.align) + " bytes at a time, so it must be " +
                      std::to_string(p.align) + "-byte aligned; got " + hex);
    }
    slot = ptr->address;
    break;
  }
  case ParamKind::I32: {
    const int64_t *v = std::get_if<int64_t>(&a);
    if (!v)
      throw wrongKind("an integer");
    if (*v < std::numeric_limits<int32_t>::min() ||
        *v > std::numeric_limits<int32_t>::max())
      throw Error(Error::Kind::ArgValue, describeArgument(p, i) + ": " +
                                             std::to_string(*v) +
                                             " does not fit in i32");
    if (p.positive && *v <= 0)
      throw notPositive(std::to_string(*v));
    int32_t narrow = static_cast<int32_t>(*v);
    std::memcpy(&slot, &narrow, sizeof narrow);
    break;
  }
  case ParamKind::I64: {
    const int64_t *v = std::get_if<int64_t>(&a);
    if (!v)
      throw wrongKind("an integer");
    if (p.positive && *v <= 0)
      throw notPositive(std::to_string(*v));
    std::memcpy(&slot, v, sizeof *v);
    break;
  }
  case ParamKind::F32: {
    double v;
    if (const double *d = std::get_if<double>(&a))
      v = *d;
    else if (const int64_t *n = std::get_if<int64_t>(&a))
      v = static_cast<double>(*n);
    else
      throw wrongKind("a real");
    // Converting a finite double beyond float's range is undefined.
    if (std::isfinite(v) && std::fabs(v) > FLT_MAX)
      throw Error(Error::Kind::ArgValue, describeArgument(p, i) + ": " +
                                             realString(v) + " overflows f32");
    float narrow = static_cast<float>(v);
    // After rounding (a tiny positive double may become 0.0f); NaN fails.
    if (p.positive && !(narrow > 0))
      throw notPositive(realString(v));
    std::memcpy(&slot, &narrow, sizeof narrow);
    break;
  }
  }
  return slot;
}

void Kernel::packArgs(const std::vector<KernelArg> &args,
                      std::vector<uint64_t> &storage) const {
  checkArgCount(args.size());
  // One 8-byte slot per parameter; cuLaunchKernel reads each parameter's
  // size from the kernel's metadata, starting at the slot's address.
  storage.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    storage[i] = packArg(i, args[i]);
}

Dim3 Kernel::gridFor(const uint64_t *slots,
                     const std::optional<Dim3> &override) const {
  if (override) {
    const Dim3 &g = *override;
    for (int i = 0; i < 3; ++i)
      if (g[i] < 1 || g[i] > kMaxGrid[i])
        throw Error(Error::Kind::ArgValue,
                    "grid override " + dimString(g) + ": dimension " +
                        std::to_string(i) + " must be in [1, " +
                        std::to_string(kMaxGrid[i]) + "] (CUDA's limit for " +
                        gridAxisName(i) + ")");
    return g;
  }
  // The grid reads integer parameters; their slots hold them packed (i32 in
  // the low 4 bytes).
  std::vector<int64_t> values;
  values.reserve(manifest_.gridParams.size());
  for (size_t index : manifest_.gridParams) {
    if (manifest_.params[index].kind == ParamKind::I32) {
      int32_t v;
      std::memcpy(&v, &slots[index], sizeof v);
      values.push_back(v);
    } else {
      int64_t v;
      std::memcpy(&v, &slots[index], sizeof v);
      values.push_back(v);
    }
  }
  return evalGrid(manifest_.grid, values);
}

Dim3 Kernel::grid(const std::vector<KernelArg> &args) const {
  std::vector<uint64_t> storage;
  packArgs(args, storage);
  return gridFor(storage.data(), std::nullopt);
}

void *Kernel::functionFor(uint64_t contextId) {
  const Driver &d = Driver::get();
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = functions_.find(contextId);
  if (found != functions_.end())
    return found->second;

  CUmodule module;
  {
    ModuleCache &cache = moduleCache();
    std::lock_guard<std::mutex> cacheLock(cache.mutex);
    auto key = std::make_pair(moduleKey_, contextId);
    auto it = cache.modules.find(key);
    if (it == cache.modules.end()) {
      std::string loaded;
      CUmodule fresh = loadModule(d, manifest_, cubin_, sass_, ptx_, loaded);
      it = cache.modules.emplace(key, std::make_pair(fresh, loaded)).first;
    }
    module = it->second.first;
    loadedImage_ = it->second.second;
  }
  CUfunction fn;
  d.check(d.moduleGetFunction(&fn, module, manifest_.kernel.c_str()),
          "cuModuleGetFunction",
          " looking up kernel '" + manifest_.kernel + "' from manifest " +
              manifest_.path);
  if (manifest_.sharedBytes > kDefaultMaxDynamicShared) {
    CUresult r = d.funcSetAttribute(
        fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        static_cast<int>(manifest_.sharedBytes));
    if (r != CUDA_SUCCESS) {
      CUdevice dev;
      int optin = -1;
      if (d.ctxGetDevice(&dev) == CUDA_SUCCESS)
        d.deviceGetAttribute(
            &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            dev);
      d.check(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
              ": kernel '" + manifest_.kernel + "' asks for " +
                  std::to_string(manifest_.sharedBytes) +
                  " bytes of dynamic shared memory; the device allows " +
                  std::to_string(optin) +
                  " per block (less the kernel's static shared memory)");
    }
  }
  functions_.emplace(contextId, fn);
  return fn;
}

void Kernel::launch(const std::vector<KernelArg> &args, uintptr_t stream,
                    const std::optional<Dim3> &gridOverride) {
  std::vector<uint64_t> storage;
  packArgs(args, storage);
  launchPacked(storage.data(), storage.size(), stream, gridOverride);
}

void Kernel::launchPacked(const uint64_t *slots, size_t count, uintptr_t stream,
                          const std::optional<Dim3> &gridOverride) {
  const Driver &d = Driver::get();
  checkArgCount(count);
  Dim3 g = gridFor(slots, gridOverride);
  uint64_t firstPointer = 0;
  for (size_t i = 0; i < count; ++i)
    if (manifest_.params[i].kind == ParamKind::Ptr) {
      firstPointer = slots[i];
      break;
    }
  CUcontext ctx = ensureContext(d, firstPointer);
  auto fn = static_cast<CUfunction>(functionFor(contextId(d, ctx)));
  // cuLaunchKernel reads parameter i from params[i]; the slots stay put.
  constexpr size_t kInline = 64;
  void *inlineParams[kInline];
  std::vector<void *> heapParams;
  void **params = inlineParams;
  if (count > kInline) {
    heapParams.resize(count);
    params = heapParams.data();
  }
  for (size_t i = 0; i < count; ++i)
    params[i] = const_cast<uint64_t *>(&slots[i]);
  const Dim3 &b = manifest_.block;
  CUresult r;
  bool early = manifest_.programmaticLaunch && d.launchKernelEx && programmaticLaunchEnabled();
  if (early) {
    // Programmatic stream serialization: the kernel's programs may start
    // once the kernel ahead of it on the stream lets them
    // (griddepcontrol.launch_dependents) or ends; the kernel waits for it
    // (griddepcontrol.wait) before touching what it wrote.
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = g[0];
    config.gridDimY = g[1];
    config.gridDimZ = g[2];
    config.blockDimX = b[0];
    config.blockDimY = b[1];
    config.blockDimZ = b[2];
    config.sharedMemBytes = manifest_.sharedBytes;
    config.hStream = reinterpret_cast<CUstream>(stream);
    config.attrs = &attr;
    config.numAttrs = 1;
    r = d.launchKernelEx(&config, fn, params, nullptr);
  } else {
    r = d.launchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], manifest_.sharedBytes,
                       reinterpret_cast<CUstream>(stream), params, nullptr);
  }
  if (r != CUDA_SUCCESS)
    d.check(r, early ? "cuLaunchKernelEx" : "cuLaunchKernel",
            " for kernel '" + manifest_.kernel + "' (grid " + dimString(g) +
                ", block " + dimString(b) + ", " +
                std::to_string(manifest_.sharedBytes) +
                " bytes dynamic shared memory)");
}

} // namespace tilec::runtime
