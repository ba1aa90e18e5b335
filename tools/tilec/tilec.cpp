//===- tilec.cpp - the whole pipeline from the command line ---------------===//
//
//   tilec kernel.mlir --arch=sm_80 --num-warps=4 --emit=all -o out/
//
// writes out/<kernel>.{ptx,cubin,json} (and .ll, .tile.mlir) per kernel; text
// emits can go to stdout with -o -. Every failure is a diagnostic on stderr
// and exit code 1. The Python package runs this in a child process when its
// extension is missing (python/tilec/compiler.py _compile_cli: IR on stdin,
// --source-name, --results), e.g. the static build of scripts/bundle.sh.
//
//===----------------------------------------------------------------------===//
#include "tilec/CPU/CpuRunner.h"
#include "tilec/Driver/Driver.h"
#include "tilec/Target/TargetDescription.h"

#include "mlir/Support/LogicalResult.h"
#include "mlir/Support/ToolUtilities.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Statistic.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using mlir::failed;
using mlir::failure;
using mlir::LogicalResult;
using mlir::success;

namespace {
enum class Emit { PTX, Cubin, LLVM, Tile, All };

cl::OptionCategory tilecCategory("tilec options");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .mlir>"), cl::init("-"),
                               cl::cat(tilecCategory));
cl::opt<std::string> arch("arch", cl::desc("GPU architecture: sm_80 or sm_90a"),
                          cl::init("sm_80"), cl::cat(tilecCategory));
cl::opt<int> numWarps("num-warps", cl::desc("warps per thread block"),
                      cl::init(tilec::kDefaultNumWarps), cl::cat(tilecCategory));
cl::opt<int> stages("stages",
                    cl::desc("shared buffers per prefetched K/V tile: 1 (FlashAttention-2's "
                             "schedule) or 2 (a ring, one barrier per iteration)"),
                    cl::init(tilec::kDefaultStages), cl::cat(tilecCategory));
cl::opt<std::string> copyBounds("copy-bounds",
                                cl::desc("how global->shared copies respect their view's "
                                         "bounds: row, tile or chunk"),
                                cl::init(tilec::kDefaultCopyBounds), cl::cat(tilecCategory));
cl::opt<std::string> loweringOptions(
    "lowering-options",
    cl::desc("more tile-to-nvvm pipeline options, verbatim (e.g. skip-unit-rescale=true)"),
    cl::init(""), cl::cat(tilecCategory));
cl::opt<bool> smemEpilogue("smem-epilogue",
                           cl::desc("store narrow register tiles (the O accumulator) through "
                                    "shared memory as 16-byte chunks (default true)"),
                           cl::init(tilec::kDefaultSmemEpilogue), cl::cat(tilecCategory));
cl::opt<Emit> emit("emit", cl::desc("what to write"), cl::init(Emit::All),
                   cl::values(clEnumValN(Emit::PTX, "ptx", "<kernel>.ptx and <kernel>.json"),
                              clEnumValN(Emit::Cubin, "cubin",
                                         "<kernel>.cubin and <kernel>.json (needs ptxas)"),
                              clEnumValN(Emit::LLVM, "llvm", "<kernel>.ll, optimised LLVM IR"),
                              clEnumValN(Emit::Tile, "tile",
                                         "<kernel>.tile.mlir, tile IR before lowering"),
                              clEnumValN(Emit::All, "all", "all of the above")),
                   cl::cat(tilecCategory));
cl::opt<std::string> output("o",
                            cl::desc("output folder (created), a file for a single text "
                                     "emit, or - for stdout"),
                            cl::value_desc("OUTDIR|FILE|-"), cl::cat(tilecCategory));
cl::opt<bool> noTilePasses("no-tile-passes",
                           cl::desc("skip the target-independent tile passes"),
                           cl::cat(tilecCategory));
cl::opt<bool> printIRAfterAll("mlir-print-ir-after-all",
                              cl::desc("print the IR after every pass to stderr (also: "
                                       "TILEC_DUMP_IR=1)"),
                              cl::cat(tilecCategory));
cl::opt<std::string> crashReproducer("crash-reproducer",
                                     cl::desc("write an MLIR reproducer here when a pass "
                                              "fails or crashes"),
                                     cl::value_desc("PATH"), cl::cat(tilecCategory));
cl::opt<bool> fromLLVMDialect(
    "from-llvm-dialect",
    cl::desc("the input is already LLVM dialect + NVVM with the ABI attributes on each kernel (TileAttrNames.h); "
             "skip the tile pipelines (testing)"),
    cl::Hidden, cl::cat(tilecCategory));
cl::opt<bool> splitInputFile("split-input-file",
                             cl::desc("compile each '// -----' chunk of the input on its "
                                      "own (for tests of diagnostics)"),
                             cl::cat(tilecCategory));
cl::list<std::string> extraSass(
    "extra-sass", cl::CommaSeparated,
    cl::desc("also assemble the PTX for these GPUs (e.g. sm_90 for an sm_80 kernel on an "
             "H100/H200): <kernel>.<arch>.cubin, listed in the manifest's \"sass\", loaded "
             "by the runtime instead of JIT-compiling the PTX"),
    cl::cat(tilecCategory));
cl::opt<std::string> sourceName("source-name",
                               cl::desc("the input buffer's name in diagnostics (default: the "
                                        "input file's path, <stdin> for -)"),
                               cl::value_desc("NAME"), cl::cat(tilecCategory));
cl::opt<std::string> resultsFile(
    "results",
    cl::desc("also write a JSON list, one object per kernel in compile order, of its name, "
             "notes and ptxas log (how the Python package's child-process compile reads a "
             "run back)"),
    cl::value_desc("FILE"), cl::cat(tilecCategory));
cl::opt<unsigned> ptxVersion("ptx-version",
                             cl::desc("PTX ISA version times ten (0: tilec's default)"),
                             cl::init(0), cl::Hidden, cl::cat(tilecCategory));

/// What --results writes: one object per compiled kernel.
json::Array results;

bool isTextEmit(Emit e) { return e == Emit::PTX || e == Emit::LLVM || e == Emit::Tile; }

int fail(const Twine &message) {
  WithColor::error(errs(), "tilec") << message << "\n";
  return 1;
}

LogicalResult reportFailure(const Twine &message) {
  fail(message);
  return failure();
}

bool writeFile(StringRef path, StringRef contents, bool binary) {
  std::error_code ec;
  raw_fd_ostream os(path, ec, binary ? sys::fs::OF_None : sys::fs::OF_Text);
  if (!ec) {
    os << contents;
    os.close();
    ec = os.error();
    // A stream destroyed with an unchecked error aborts the process.
    os.clear_error();
  }
  if (ec) {
    fail("cannot write " + path + ": " + ec.message());
    return false;
  }
  return true;
}

/// The manifest naming only the artifacts this run writes: the runtime
/// loads whatever it names.
std::string manifestFor(const tilec::CompiledKernel &kernel, bool withPtx, bool withCubin) {
  Expected<json::Value> doc = json::parse(kernel.manifestJson);
  if (!doc) {
    consumeError(doc.takeError());
    return kernel.manifestJson;
  }
  json::Object *object = doc->getAsObject();
  if (!withPtx)
    object->erase("ptx");
  if (!withCubin) {
    object->erase("cubin");
    object->erase("sass");
  }
  std::string text;
  raw_string_ostream os(text);
  os << formatv("{0:2}", *doc) << "\n";
  return text;
}

void printStats(const tilec::CompiledKernel &kernel) {
  Expected<json::Value> doc = json::parse(kernel.manifestJson);
  if (!doc) {
    consumeError(doc.takeError());
    return;
  }
  const json::Object *object = doc->getAsObject();
  auto infoText = [](const json::Object *info) -> std::string {
    if (!info)
      return "no ptxas report";
    auto get = [&](StringRef key) { return info->getInteger(key).value_or(-1); };
    return formatv("{0} registers, {1} B spill stores, {2} B spill loads, {3} B static smem",
                   get("registers"), get("spill_stores"), get("spill_loads"),
                   get("shared_bytes_static"));
  };
  errs() << "tilec: @" << kernel.name << " " << arch << ": "
         << infoText(object->getObject("ptxas_info")) << ", "
         << object->getInteger("shared_bytes").value_or(0) << " B launch smem, "
         << kernel.ptx.size() << " B PTX\n";
  if (const json::Array *sass = object->getArray("sass"))
    for (const json::Value &entry : *sass)
      if (const json::Object *image = entry.getAsObject())
        errs() << "tilec: @" << kernel.name << " " << image->getString("arch").value_or("?")
               << " (extra SASS): " << infoText(image->getObject("ptxas_info")) << "\n";
}

/// Compiles one input buffer and writes what --emit asks for; text for
/// stdout goes to `os`.
LogicalResult compileAndWrite(StringRef source, StringRef bufferName, bool stats,
                              raw_ostream &os) {
  const bool wantCubin = emit == Emit::Cubin || emit == Emit::All;
  const bool toStdout = output == "-" || (output.empty() && isTextEmit(emit));
  tilec::CompileOptions options;
  options.arch = arch;
  options.strategy.numWarps = numWarps;
  options.strategy.stages = stages;
  options.strategy.smemEpilogue = smemEpilogue;
  options.strategy.copyBounds = copyBounds;
  options.strategy.loweringOptions = loweringOptions;
  options.runTilePasses = !noTilePasses;
  options.emitCubin = wantCubin || stats;
  options.printIRAfterAll = printIRAfterAll;
  options.crashReproducerPath = crashReproducer;
  options.inputIsLLVMDialect = fromLLVMDialect;
  options.printStats = stats;
  options.ptxVersion = ptxVersion;
  options.extraSass.assign(extraSass.begin(), extraSass.end());

  Expected<std::vector<tilec::CompiledKernel>> kernels =
      tilec::compileForGPU(source, bufferName, options);
  if (!kernels) {
    std::string message = toString(kernels.takeError());
    // MLIR diagnostics already say "file:line:col: error:"; others need a prefix.
    if (StringRef(message).contains(": error: "))
      errs() << message << "\n";
    else
      fail(message);
    return failure();
  }
  for (const tilec::CompiledKernel &kernel : *kernels) {
    for (const std::string &note : kernel.notes)
      WithColor::note(errs(), "tilec") << note << "\n";
    if (stats)
      printStats(kernel);
    if (!resultsFile.empty())
      results.push_back(json::Object{{"name", kernel.name},
                                     {"notes", json::Array(kernel.notes)},
                                     {"ptxas_log", kernel.ptxasLog}});
  }
  if (emit == Emit::Cubin)
    for (const tilec::CompiledKernel &kernel : *kernels)
      if (kernel.cubin.empty())
        return reportFailure("--emit=cubin needs ptxas; none was found for @" + kernel.name);

  auto textOf = [](const tilec::CompiledKernel &kernel, Emit e) -> const std::string & {
    return e == Emit::PTX ? kernel.ptx : e == Emit::LLVM ? kernel.llvmIR : kernel.tileIR;
  };
  if (toStdout) {
    for (const tilec::CompiledKernel &kernel : *kernels)
      os << textOf(kernel, emit);
    return success();
  }

  // A single emit to a path that is not a folder and has an extension (any:
  // k.ptx, out.txt, x.mlir) names the file itself; otherwise -o is a folder.
  if (emit != Emit::All && !sys::fs::is_directory(output) && sys::path::has_extension(output)) {
    if (kernels->size() != 1)
      return reportFailure(Twine(kernels->size()) + " kernels: give -o a folder");
    const tilec::CompiledKernel &kernel = kernels->front();
    if (emit == Emit::Cubin && !kernel.sass.empty())
      return reportFailure("--extra-sass writes more cubins than the one file " + output +
                           ": give -o a folder");
    return success(writeFile(output, emit == Emit::Cubin ? kernel.cubin : textOf(kernel, emit),
                             emit == Emit::Cubin));
  }

  if (std::error_code ec = sys::fs::create_directories(output))
    return reportFailure("cannot create " + output + ": " + ec.message());
  if (!sys::fs::is_directory(output))
    return reportFailure("-o " + output + " is not a folder (a single file needs --emit=" +
                         "ptx|cubin|llvm|tile and a file name with an extension)");
  auto pathFor = [&](const tilec::CompiledKernel &kernel, StringRef extension) {
    SmallString<256> path(output);
    sys::path::append(path, kernel.name + extension);
    return std::string(path);
  };
  for (const tilec::CompiledKernel &kernel : *kernels) {
    const bool all = emit == Emit::All;
    const bool ptx = all || emit == Emit::PTX;
    const bool cubin = (all || emit == Emit::Cubin) && !kernel.cubin.empty();
    bool ok = true;
    if (ptx)
      ok &= writeFile(pathFor(kernel, ".ptx"), kernel.ptx, false);
    if (cubin) {
      ok &= writeFile(pathFor(kernel, ".cubin"), kernel.cubin, true);
      for (const tilec::CompiledKernel::Sass &image : kernel.sass) {
        SmallString<256> path(output);
        sys::path::append(path, image.file);
        ok &= writeFile(std::string(path), image.cubin, true);
      }
    }
    if (all || emit == Emit::LLVM)
      ok &= writeFile(pathFor(kernel, ".ll"), kernel.llvmIR, false);
    if ((all || emit == Emit::Tile) && !kernel.tileIR.empty())
      ok &= writeFile(pathFor(kernel, ".tile.mlir"), kernel.tileIR, false);
    if (ptx || cubin)
      ok &= writeFile(pathFor(kernel, ".json"), manifestFor(kernel, ptx, cubin), false);
    if (!ok)
      return failure();
  }
  return success();
}
} // namespace

int main(int argc, char **argv) {
  // `tilec run-cpu FILE --kernel K --grid X,Y,Z --arg ...` executes tile IR on
  // the CPU (lib/CPU); it has its own options.
  if (argc > 1 && StringRef(argv[1]) == "run-cpu")
    return tilec::runCpuMain(argc - 1, argv + 1);
  InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(tilecCategory);
  // libLLVM already owns --stats (LLVM's statistics, compiled out of release
  // builds); a second option of that name aborts, so give LLVM's ours.
  if (cl::Option *llvmStats = cl::getRegisteredOptions().lookup("stats")) {
    llvmStats->setDescription("print pass timing and statistics, and each kernel's "
                              "registers, spills and shared memory");
    llvmStats->addCategory(tilecCategory);
    llvmStats->setHiddenFlag(cl::NotHidden);
  }
  cl::SetVersionPrinter([](raw_ostream &os) { os << tilec::getCompilerVersion() << "\n"; });
  cl::ParseCommandLineOptions(argc, argv,
                              "tilec: tile IR -> PTX, cubin and launch manifests\n");
  const bool stats = AreStatisticsEnabled();

  if (!isTextEmit(emit) && (output.empty() || output == "-"))
    return fail("--emit=" + std::string(emit == Emit::All ? "all (the default)" : "cubin") +
                " writes files: give -o OUTDIR (or -o FILE with a single --emit)");
  if (emit == Emit::Tile && fromLLVMDialect)
    return fail("--emit=tile has nothing to write with --from-llvm-dialect");
  if (numWarps < 1 || numWarps > 16 || (numWarps & (numWarps - 1)) != 0)
    return fail("--num-warps=" + Twine(numWarps.getValue()) +
                " must be a power of two in [1, 16]");
  if (stages != 1 && stages != 2)
    return fail("--stages=" + Twine(stages.getValue()) + " must be 1 or 2");
  // The tile lowering emits mma.sync; input already in the LLVM dialect goes
  // to any architecture LLVM knows (checked when the target is built).
  // The supported ones are include/tilec/Target/TargetDescription.h's table.
  if (!fromLLVMDialect && !tilec::lookupTarget(arch.getValue()))
    return fail("--arch=" + arch.getValue() +
                " is not supported: tilec emits mma.sync (sm_80 and newer): use sm_80, sm_86, "
                "sm_89, sm_90 or sm_90a");

  if (StringRef(inputFile).ends_with(".py"))
    return fail(inputFile + " is Python: tilec compiles tile-dialect MLIR; compile @tilec.jit "
                            "kernels through the Python package (tilec.Kernel.compile, "
                            "scripts/build_artifacts.py)");
  ErrorOr<std::unique_ptr<MemoryBuffer>> input = MemoryBuffer::getFileOrSTDIN(inputFile);
  if (!input)
    return fail("cannot read " + inputFile + ": " + input.getError().message());
  StringRef bufferName = !sourceName.empty() ? StringRef(sourceName)
                         : inputFile == "-"   ? StringRef("<stdin>")
                                              : StringRef(inputFile);
  if (!splitInputFile) {
    if (failed(compileAndWrite((*input)->getBuffer(), bufferName, stats, outs())))
      return 1;
    if (!resultsFile.empty()) {
      std::string text;
      raw_string_ostream os(text);
      os << formatv("{0:2}", json::Value(std::move(results))) << "\n";
      if (!writeFile(resultsFile, text, false))
        return 1;
    }
    return 0;
  }
  if (!resultsFile.empty())
    return fail("--results takes one input, not --split-input-file");
  // Every chunk runs even after one fails, so one test file can hold many
  // error cases.
  return failed(mlir::splitAndProcessBuffer(
             std::move(*input),
             [&](std::unique_ptr<MemoryBuffer> chunk, raw_ostream &os) {
               // The chunk's name says where it starts ("within split at
               // FILE:LINE offset "), as in mlir-opt.
               return compileAndWrite(chunk->getBuffer(), chunk->getBufferIdentifier(), stats,
                                      os);
             },
             outs(), mlir::kDefaultSplitMarker, mlir::kDefaultSplitMarker))
             ? 1
             : 0;
}
