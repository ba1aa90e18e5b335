//===- tilec-layout.cpp - draw a distributed layout -----------------------===//
//
// Prints one of the layouts the lowering uses as the picture the PTX ISA
// draws for fragments (who owns each element) or as one line per thread,
// followed by its #tile.linear attribute, so a layout in a lit test or a
// lowering bug can be read off without running anything on a GPU.
//
//   tilec-layout mma-acc|mma-a|mma-b|coalesced --shape 64x64 --warps 4
//                [--vec 8] [--threads]
//
//===----------------------------------------------------------------------===//
#include "tilec/Layout/Sm80Layouts.h"
#include "tilec/Layout/LinearLayout.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using tilec::LinearLayout;
namespace sm80 = tilec::sm80;

namespace {

const char *const kUsage =
    "usage: tilec-layout mma-acc|mma-a|mma-b|coalesced --shape RxC[xD] --warps W\n"
    "                    [--vec V] [--threads]\n"
    "  mma-acc    m16n8k16 accumulator of an MxN tile, rows split over warps\n"
    "  mma-a      m16n8k16 A operand of an MxK tile, rows split over warps\n"
    "  mma-b      m16n8k16 B operand of a KxN tile, replicated over warps\n"
    "  coalesced  global access, V consecutive elements per thread (default 8)\n"
    "  --threads  one line per thread instead of the element map\n";

int fail(const std::string &message) {
  std::cerr << "tilec-layout: " << message << "\n" << kUsage;
  return 1;
}

bool parsePositive(const std::string &text, int64_t &out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 12)
    return false;
  out = std::stoll(text);
  return out > 0;
}

bool parseShape(const std::string &text, std::vector<int64_t> &shape) {
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, 'x');) {
    int64_t extent;
    if (!parsePositive(part, extent))
      return false;
    shape.push_back(extent);
  }
  return !shape.empty() && shape.size() <= 3 && text.back() != 'x';
}

std::string shapeStr(const std::vector<int64_t> &shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? "x" : "") + std::to_string(shape[i]);
  return out;
}

} // namespace

int main(int argc, char **argv) {
  std::string kind, shapeText;
  int64_t warps = 1, vec = 8;
  bool threads = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    std::string text;
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--threads") {
      threads = true;
    } else if (arg == "--shape") {
      if (!value(shapeText))
        return fail("--shape needs a value such as 64x64");
    } else if (arg == "--warps") {
      if (!value(text) || !parsePositive(text, warps))
        return fail("--warps needs a positive integer");
    } else if (arg == "--vec") {
      if (!value(text) || !parsePositive(text, vec))
        return fail("--vec needs a positive integer");
    } else if (!arg.empty() && arg[0] != '-' && kind.empty()) {
      kind = arg;
    } else {
      return fail("unexpected argument '" + arg + "'");
    }
  }
  if (kind.empty())
    return fail("name a layout");
  std::vector<int64_t> shape;
  if (shapeText.empty() || !parseShape(shapeText, shape))
    return fail("--shape needs positive extents such as 64x64, got '" + shapeText + "'");
  if (tilec::log2Exact(warps) < 0 || warps > 32)
    return fail("--warps must be a power of two in [1, 32] (CUDA's 1024 threads per block), got " +
                std::to_string(warps));

  // The factories assert their preconditions; say them here instead, since
  // asserts vanish in release builds.
  LinearLayout layout;
  bool mma = kind == "mma-acc" || kind == "mma-a" || kind == "mma-b";
  if (mma) {
    if (shape.size() != 2)
      return fail(kind + " needs a 2-D shape, got " + shapeStr(shape));
    int64_t rows = shape[0], cols = shape[1];
    if (tilec::log2Exact(rows) < 0 || tilec::log2Exact(cols) < 0)
      return fail(kind + " needs power-of-two extents, got " + shapeStr(shape));
    if (kind == "mma-b") {
      if (rows % 16 || cols % 8)
        return fail("mma-b needs K a multiple of 16 and N a multiple of 8, got " + shapeStr(shape));
      layout = sm80::mmaOperandB(rows, cols, warps);
    } else {
      int64_t colMultiple = kind == "mma-a" ? 16 : 8;
      if (rows % (16 * warps) || cols % colMultiple)
        return fail(kind + " needs rows a multiple of 16 x " + std::to_string(warps) +
                    " warps and columns a multiple of " + std::to_string(colMultiple) + ", got " +
                    shapeStr(shape));
      layout = kind == "mma-a" ? sm80::mmaOperandA(rows, cols, warps)
                               : sm80::mmaAccumulator(rows, cols, warps);
    }
  } else if (kind == "coalesced") {
    for (int64_t extent : shape)
      if (tilec::log2Exact(extent) < 0)
        return fail("coalesced needs power-of-two extents, got " + shapeStr(shape));
    if (tilec::log2Exact(vec) < 0)
      return fail("--vec must be a power of two, got " + std::to_string(vec));
    layout = LinearLayout::coalesced(shape, warps, vec);
  } else {
    return fail("unknown layout '" + kind + "'");
  }

  std::string why = layout.checkCovers(shape);
  if (!why.empty())
    return fail("internal error: the layout does not cover " + shapeStr(shape) + ": " + why);
  std::cout << "// " << kind << " " << shapeStr(shape) << ", " << warps << " warp"
            << (warps == 1 ? "" : "s") << ": registers x lanes x warps = " << layout.numRegs()
            << " x " << layout.numLanes() << " x " << layout.numWarps() << "\n";
  std::cout << "#tile.linear<" << layout.str() << ">\n";
  if (threads || shape.size() != 2)
    std::cout << layout.drawThreadMap();
  else
    std::cout << layout.drawElementMap(shape);
  return 0;
}
