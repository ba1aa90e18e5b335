//===- Grid.cpp - Grid expressions of launch manifests --------------------===//
//
// Evaluation only: the text is parsed by tilec::grid (GridSyntax.h), the
// one parser of the grid language.

#include "tilec/runtime/Runtime.h"

#include <limits>

namespace tilec::runtime {

GridExpr GridExpr::parse(const std::string &source,
                         const std::vector<std::string> &names,
                         const std::string &what) {
  grid::ParseError error;
  std::optional<grid::Program> program = grid::parse(source, names, error);
  if (!program)
    throw Error(Error::Kind::Grid, what + " '" + source + "': " + error.message +
                                       " at column " + std::to_string(error.column));
  GridExpr e;
  e.source_ = source;
  e.what_ = what;
  e.program_ = std::move(*program);
  return e;
}

std::string GridExpr::describe(const std::vector<int64_t> &slots) const {
  std::string s = what_ + " '" + source_ + "'";
  if (program_.names.empty())
    return s;
  s += " (";
  for (size_t i = 0; i < program_.names.size(); ++i)
    s += (i ? ", " : "") + program_.names[i].first + "=" +
         std::to_string(slots[program_.names[i].second]);
  return s + ")";
}

int64_t GridExpr::eval(const std::vector<int64_t> &slots) const {
  // parse() bounded the stack depth, so a fixed stack suffices and a launch
  // does not allocate.
  int64_t stack[kMaxStack];
  size_t sp = 0;
  auto overflow = [&]() -> Error {
    return Error(Error::Kind::Grid,
                 describe(slots) + ": int64 overflow while evaluating");
  };
  for (const grid::Instr &in : program_.code) {
    if (in.op == Op::Const || in.op == Op::Slot) {
      stack[sp++] = in.op == Op::Const ? in.value : slots.at(in.value);
      continue;
    }
    if (in.op == Op::Neg) {
      if (stack[sp - 1] == std::numeric_limits<int64_t>::min())
        throw overflow();
      stack[sp - 1] = -stack[sp - 1];
      continue;
    }
    int64_t b = stack[--sp];
    int64_t a = stack[sp - 1];
    int64_t r;
    switch (in.op) {
    case Op::Add:
      if (__builtin_add_overflow(a, b, &r))
        throw overflow();
      break;
    case Op::Sub:
      if (__builtin_sub_overflow(a, b, &r))
        throw overflow();
      break;
    case Op::Mul:
      if (__builtin_mul_overflow(a, b, &r))
        throw overflow();
      break;
    case Op::FloorDiv:
    case Op::CDiv:
      if (b == 0)
        throw Error(Error::Kind::Grid, describe(slots) + ": division by zero");
      if (a == std::numeric_limits<int64_t>::min() && b == -1)
        throw overflow();
      r = a / b; // truncates toward zero; round toward -inf / +inf below
      if (a % b != 0) {
        bool negative = (a < 0) != (b < 0);
        if (in.op == Op::FloorDiv && negative)
          --r;
        if (in.op == Op::CDiv && !negative)
          ++r;
      }
      break;
    case Op::Min:
      r = a < b ? a : b;
      break;
    case Op::Max:
      r = a > b ? a : b;
      break;
    default: // Const, Slot and Neg were handled above.
      __builtin_unreachable();
    }
    stack[sp - 1] = r;
  }
  return stack[0];
}

int64_t GridExpr::evalDim(const std::vector<int64_t> &slots, int64_t max,
                          const char *limitName) const {
  int64_t v = eval(slots);
  if (v < 1 || v > max)
    throw Error(Error::Kind::Grid,
                describe(slots) + " = " + std::to_string(v) +
                    ", outside the launchable range [1, " +
                    std::to_string(max) + "]" +
                    (limitName ? std::string(" (CUDA's limit for ") + limitName + ")"
                               : std::string()));
  return v;
}

const char *gridAxisName(int axis) {
  static const char *const names[3] = {"gridDim.x", "gridDim.y", "gridDim.z"};
  return axis >= 0 && axis < 3 ? names[axis] : "gridDim.?";
}

Dim3 evalGrid(const std::array<GridExpr, 3> &grid,
              const std::vector<int64_t> &slots) {
  Dim3 dims;
  for (int i = 0; i < 3; ++i)
    dims[i] = static_cast<uint32_t>(
        grid[i].evalDim(slots, kMaxGrid[i], gridAxisName(i)));
  return dims;
}

Dim3 evalGrid(const std::vector<std::string> &exprs,
              const std::vector<std::pair<std::string, int64_t>> &values) {
  if (exprs.size() != 3)
    throw Error(Error::Kind::Grid, "a grid has 3 expressions, got " +
                                       std::to_string(exprs.size()));
  std::vector<std::string> names;
  std::vector<int64_t> slots;
  for (const auto &[name, value] : values) {
    names.push_back(name);
    slots.push_back(value);
  }
  std::array<GridExpr, 3> grid;
  for (int i = 0; i < 3; ++i)
    grid[i] = GridExpr::parse(exprs[i], names,
                              "grid[" + std::to_string(i) + "]");
  return evalGrid(grid, slots);
}

} // namespace tilec::runtime
