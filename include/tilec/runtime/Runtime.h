//===- Runtime.h - Load and launch tilec-compiled kernels -----------------===//
//
// The tilec runtime loads the artifacts the compiler writes for each kernel
// (a launch manifest <kernel>.json beside <kernel>.cubin and/or <kernel>.ptx)
// and launches them through the CUDA driver API. It depends on neither LLVM
// nor a CUDA toolkit: libcuda.so.1 is dlopen'ed at first use, so a program
// linked against the runtime starts on any machine and reports a clear error
// where no driver exists.
//
// Errors are reported by throwing tilec::runtime::Error; its message names
// the manifest, the parameter or the CUDA call involved.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_RUNTIME_RUNTIME_H
#define TILEC_RUNTIME_RUNTIME_H

#include "tilec/runtime/GridSyntax.h"
#include "tilec/runtime/Json.h"

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace tilec::runtime {

class Error : public std::runtime_error {
public:
  enum class Kind {
    Driver,   ///< no usable CUDA driver, or a CUDA call failed
    Manifest, ///< a manifest, or a file it names, is missing or malformed
    Grid,     ///< a grid expression is malformed or cannot be evaluated
    ArgType,  ///< wrong number of launch arguments, or one of the wrong kind
    ArgValue, ///< a launch argument out of its parameter's range
  };
  Error(Kind kind, const std::string &message)
      : std::runtime_error(message), kind_(kind) {}
  Kind kind() const noexcept { return kind_; }

private:
  Kind kind_;
};

/// How a kernel parameter is passed to cuLaunchKernel: ptr = 8-byte device
/// pointer, i32 = 4 bytes, i64 = 8 bytes, f32 = 4 bytes.
enum class ParamKind { Ptr, I32, I64, F32 };
/// Element type a ptr parameter points to.
enum class ElemType { F16, BF16, F32, I32, I64 };

const char *toString(ParamKind kind); // "ptr", "i32", ...
const char *toString(ElemType elem);  // "f16", "bf16", ...

struct Param {
  std::string name;
  ParamKind kind = ParamKind::I32;
  ElemType elem = ElemType::F32; ///< meaningful only when kind == Ptr
  /// Declared > 0 in the kernel (tl.assume(x > 0)); the compiled code relies
  /// on it, so a launch with a value <= 0 (or NaN) is rejected. Not for Ptr.
  bool positive = false;
  /// For Ptr: the widest single access the kernel makes through it, in
  /// bytes (16 for cp.async); a launch with a pointer not aligned to it is
  /// rejected. 0: no requirement beyond the element's.
  int64_t align = 0;
};

/// "argument 'q' (param 0, ptr to f16)": how errors name an argument.
std::string describeArgument(const Param &param, size_t index);

using Dim3 = std::array<uint32_t, 3>;

/// CUDA's grid limits, the one place the runtime states them: gridDim.x <=
/// 2^31 - 1, gridDim.y and gridDim.z <= 65535 (every GPU since sm_30). A grid
/// evaluated from the manifest and a grid override are both checked against
/// them, with an error naming the axis and its limit.
inline constexpr std::array<int64_t, 3> kMaxGrid = {(int64_t(1) << 31) - 1,
                                                    65535, 65535};
/// "gridDim.x", "gridDim.y", "gridDim.z" for axis 0, 1, 2.
const char *gridAxisName(int axis);

/// One grid dimension as an integer expression over named values (the
/// language of GridSyntax.h). Names are bound to slots when parsing, so
/// evaluation is a walk over a small postfix program.
class GridExpr {
public:
  GridExpr() = default;
  /// Parses `source`; name i of `names` reads slot i at evaluation. `what`
  /// prefixes error messages (e.g. "manifest foo.json: grid[0]").
  static GridExpr parse(const std::string &source,
                        const std::vector<std::string> &names,
                        const std::string &what);
  /// Evaluates with slot values `slots`; throws Error(Grid) on division by
  /// zero or int64 overflow.
  int64_t eval(const std::vector<int64_t> &slots) const;
  /// Like eval, then checks the value lies in [1, max]; `limitName` (e.g.
  /// "gridDim.y") names the limit in the error.
  int64_t evalDim(const std::vector<int64_t> &slots, int64_t max,
                  const char *limitName = nullptr) const;
  const std::string &source() const { return source_; }

private:
  static constexpr size_t kMaxStack = grid::kMaxStack;
  using Op = grid::Op;
  /// "<what> '<source>' (name=value, ...)" for error messages.
  std::string describe(const std::vector<int64_t> &slots) const;

  std::string source_;
  std::string what_;
  grid::Program program_;
};

/// Evaluates the three grid dimensions and checks the result is a launchable
/// grid: every dimension in [1, kMaxGrid[axis]].
Dim3 evalGrid(const std::array<GridExpr, 3> &grid,
              const std::vector<int64_t> &slots);

/// Parses and evaluates three grid expressions over `values` (for tests and
/// tools).
Dim3 evalGrid(const std::vector<std::string> &exprs,
              const std::vector<std::pair<std::string, int64_t>> &values);

/// The launch manifest of one compiled kernel.
struct Manifest {
  std::string path;      ///< the manifest file, as given
  std::string kernel;    ///< entry symbol in the module
  std::string arch;      ///< e.g. "sm_80"; empty when the manifest omits it
  std::string cubinPath; ///< resolved against the manifest's folder; may be ""
  std::string ptxPath;   ///< resolved against the manifest's folder; may be ""
  /// Machine code of the same PTX for other GPUs ("sass": [{"arch", "cubin"}]),
  /// e.g. sm_90 for an sm_80 kernel run on an H100/H200: loaded instead of
  /// JIT-compiling the PTX when the device matches one.
  struct Sass {
    std::string arch;
    std::string cubinPath; ///< resolved against the manifest's folder
  };
  std::vector<Sass> sass;
  Dim3 block{1, 1, 1};
  uint32_t sharedBytes = 0; ///< dynamic shared memory per block
  /// "programmatic_launch": the kernel waits for the kernels before it on
  /// its stream (tile.wait_prior_kernels, sm_90+), so it is launched with
  /// programmatic stream serialization: its programs may start while the
  /// kernel ahead of it finishes (unless $TILEC_PDL=0).
  bool programmaticLaunch = false;
  std::array<GridExpr, 3> grid;
  std::vector<Param> params;
  /// Slot i of the grid expressions is the value of params[gridParams[i]].
  std::vector<size_t> gridParams;
  /// The whole document, including keys the runtime does not interpret.
  JsonValue json;
};

/// Reads and validates a manifest; throws Error(Manifest) naming the file
/// and the problem.
Manifest loadManifest(const std::string &path);
/// Validates manifest text; `path` locates the cubin/PTX and names the
/// manifest in errors.
Manifest parseManifest(std::string_view text, const std::string &path);

/// Whether libcuda.so.1 can be loaded and initialized; otherwise, why not.
bool driverAvailable(std::string *reason = nullptr);

/// A launch argument: a device pointer for ptr parameters, an integer for
/// i32/i64 parameters, a real (or an integer) for f32 parameters.
struct DevicePtr {
  uint64_t address;
};
using KernelArg = std::variant<DevicePtr, int64_t, double>;

class Kernel {
public:
  /// Parses the manifest, reads the cubin/PTX it names and makes sure a CUDA
  /// driver is present. The module itself is loaded at the first launch in
  /// each CUDA context (and shared with other kernels loaded from the same
  /// manifest).
  static std::shared_ptr<Kernel> load(const std::string &manifestPath);

  const Manifest &manifest() const { return manifest_; }

  /// Which image the module came from when it was loaded ("cubin sm_80",
  /// "cubin sm_90", "ptx (JIT for sm_90)"): at the first launch in a context
  /// (with several contexts, the latest); empty before the first launch.
  std::string loadedImage() const;

  /// Throws Error(ArgType) naming the parameters unless `count` matches.
  void checkArgCount(size_t count) const;

  /// The grid a launch with `args` uses.
  Dim3 grid(const std::vector<KernelArg> &args) const;

  /// Checks argument `index` against its parameter (kind, range, tl.assume
  /// positivity, pointer alignment) and returns the 8-byte slot cuLaunchKernel
  /// reads it from: the prepared half of a launch (see launchPacked).
  uint64_t packArg(size_t index, const KernelArg &arg) const;

  /// The hot path of a launch: `slots` holds one packed value per parameter
  /// (packArg); the grid comes from the manifest's expressions over them, or
  /// `grid`. Same context and stream rules as launch().
  void launchPacked(const uint64_t *slots, size_t count, uintptr_t stream,
                    const std::optional<Dim3> &grid = std::nullopt);

  /// Launches on `stream` (a CUstream as an integer; 0 is the legacy default
  /// stream) in the current CUDA context. When no context is current, the
  /// context owning the first pointer argument is made current, or else the
  /// primary context of device 0. `grid` overrides the manifest's grid.
  void launch(const std::vector<KernelArg> &args, uintptr_t stream,
              const std::optional<Dim3> &grid = std::nullopt);

private:
  Kernel(Manifest manifest, std::string cubin, std::vector<std::string> sass,
         std::string ptx, std::string moduleKey);

  /// Packs `args` into 8-byte slots (one per parameter).
  void packArgs(const std::vector<KernelArg> &args,
                std::vector<uint64_t> &storage) const;
  /// The grid over packed slots (the integer parameters the grid reads), or
  /// `override` checked against kMaxGrid.
  Dim3 gridFor(const uint64_t *slots, const std::optional<Dim3> &override) const;
  /// The CUfunction (as void*, to keep cuda.h out of this header) for the
  /// current context, whose id is `contextId`; loads the module on first use.
  void *functionFor(uint64_t contextId);

  Manifest manifest_;
  std::string cubin_; ///< image bytes; empty when the manifest has none
  std::vector<std::string> sass_; ///< image bytes of manifest_.sass, in order
  std::string ptx_;
  std::string loadedImage_;
  /// Names the module in the process-wide per-context module cache: the
  /// manifest's absolute path and a hash of the images, so a recompiled
  /// kernel is not served from a stale module.
  std::string moduleKey_;
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, void *> functions_; ///< context id -> function
};

} // namespace tilec::runtime

#endif // TILEC_RUNTIME_RUNTIME_H
