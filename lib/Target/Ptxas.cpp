//===- Ptxas.cpp - PTX -> cubin through the CUDA toolkit's ptxas ----------===//
#include "tilec/Target/Ptxas.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static bool isExecutable(const Twine &path) {
  return sys::fs::exists(path) && !sys::fs::is_directory(path) &&
         sys::fs::can_execute(path);
}

std::optional<std::string> tilec::findPtxas() {
  // An explicit TILEC_PTXAS wins even when it names nothing usable, so
  // `TILEC_PTXAS=` turns cubin generation off (tests use this to exercise
  // the no-toolkit path on a machine that has one).
  if (std::optional<std::string> explicitPath = sys::Process::GetEnv("TILEC_PTXAS")) {
    if (isExecutable(*explicitPath))
      return *explicitPath;
    return std::nullopt;
  }
  SmallVector<std::string, 2> roots;
  if (std::optional<std::string> cudaHome = sys::Process::GetEnv("CUDA_HOME"))
    roots.push_back(*cudaHome);
  roots.push_back("/usr/local/cuda");
  for (const std::string &root : roots) {
    SmallString<128> candidate(root);
    sys::path::append(candidate, "bin", "ptxas");
    if (isExecutable(candidate))
      return std::string(candidate);
  }
  if (ErrorOr<std::string> onPath = sys::findProgramByName("ptxas"))
    return *onPath;
  return std::nullopt;
}

namespace {
/// A temporary file removed when this goes out of scope.
struct TempFile {
  SmallString<128> path;
  std::unique_ptr<FileRemover> remover;

  Error create(StringRef prefix, StringRef suffix) {
    if (std::error_code ec = sys::fs::createTemporaryFile(prefix, suffix, path))
      return createStringError(ec, "cannot create a temporary ." + suffix + " file: " +
                                       ec.message());
    remover = std::make_unique<FileRemover>(path);
    return Error::success();
  }
};
} // namespace

Expected<tilec::PtxasResult> tilec::runPtxas(StringRef ptxasPath, StringRef ptx,
                                             StringRef arch) {
  TempFile ptxFile, cubinFile, logFile;
  if (Error e = ptxFile.create("tilec", "ptx"))
    return std::move(e);
  if (Error e = cubinFile.create("tilec", "cubin"))
    return std::move(e);
  if (Error e = logFile.create("tilec", "ptxas.log"))
    return std::move(e);
  {
    std::error_code ec;
    raw_fd_ostream os(ptxFile.path, ec);
    if (ec)
      return createStringError(ec, "cannot write " + ptxFile.path + ": " + ec.message());
    os << ptx;
  }

  std::string archFlag = ("-arch=" + arch).str();
  SmallVector<StringRef> args = {ptxasPath, archFlag, "-O3", "-v",
                                 ptxFile.path, "-o", cubinFile.path};
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(logFile.path),
                                          StringRef(logFile.path)};
  std::string execError;
  int rc = sys::ExecuteAndWait(ptxasPath, args, /*Env=*/std::nullopt, redirects,
                               /*SecondsToWait=*/0, /*MemoryLimit=*/0, &execError);

  PtxasResult result;
  if (ErrorOr<std::unique_ptr<MemoryBuffer>> log = MemoryBuffer::getFile(logFile.path))
    result.log = (*log)->getBuffer().str();
  if (rc != 0) {
    std::string message = ("ptxas -arch=" + arch + " failed").str();
    if (rc < 0)
      message += " to run (" + execError + ")";
    else
      message += " with exit code " + std::to_string(rc);
    if (!result.log.empty())
      message += ":\n" + result.log;
    return createStringError(inconvertibleErrorCode(), message);
  }
  ErrorOr<std::unique_ptr<MemoryBuffer>> cubin =
      MemoryBuffer::getFile(cubinFile.path, /*IsText=*/false,
                            /*RequiresNullTerminator=*/false);
  if (!cubin)
    return createStringError(cubin.getError(), "ptxas wrote no cubin: " +
                                                   cubin.getError().message());
  result.cubin = (*cubin)->getBuffer().str();
  return result;
}

/// The integer right before `suffix` in `line` ("24 bytes spill stores"), if any.
static std::optional<int64_t> numberBefore(StringRef line, StringRef suffix) {
  size_t pos = line.find(suffix);
  if (pos == StringRef::npos)
    return std::nullopt;
  StringRef head = line.substr(0, pos).rtrim();
  size_t start = head.find_last_not_of("0123456789");
  StringRef digits = start == StringRef::npos ? head : head.substr(start + 1);
  int64_t value;
  if (digits.getAsInteger(10, value))
    return std::nullopt;
  return value;
}

tilec::PtxasInfo tilec::parsePtxasInfo(StringRef log, StringRef kernel) {
  // ptxas -v prints, per function:
  //   ptxas info    : Compiling entry function 'k' for 'sm_80'
  //   ptxas info    : Function properties for k
  //       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 40 registers, 4096 bytes smem, 380 bytes cmem[0]
  // Only the section of `kernel` counts; device functions have their own.
  PtxasInfo info;
  bool inKernel = false;
  SmallVector<StringRef> lines;
  log.split(lines, '\n');
  std::string entryTag = ("entry function '" + kernel + "'").str();
  std::string propertiesTag = ("Function properties for " + kernel).str();
  for (StringRef line : lines) {
    if (line.contains("Compiling entry function") || line.contains("Function properties for")) {
      inKernel = line.contains(entryTag) || line.trim().ends_with(propertiesTag);
      continue;
    }
    if (!inKernel)
      continue;
    if (auto v = numberBefore(line, " bytes stack frame"))
      info.stackFrame = *v;
    if (auto v = numberBefore(line, " bytes spill stores"))
      info.spillStores = *v;
    if (auto v = numberBefore(line, " bytes spill loads"))
      info.spillLoads = *v;
    if (auto v = numberBefore(line, " registers"))
      info.registers = *v;
    if (auto v = numberBefore(line, " bytes smem"))
      info.sharedBytesStatic = *v;
  }
  // ptxas omits "bytes smem" when a kernel declares no shared memory.
  if (info.registers >= 0 && info.sharedBytesStatic < 0)
    info.sharedBytesStatic = 0;
  return info;
}
