//===- Grid.cpp - Grid expressions of launch manifests --------------------===//

#include "tilec/runtime/Runtime.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace tilec::runtime {

/// Recursive-descent parser that compiles an expression to postfix code:
///   expr  := term (('+' | '-') term)*
///   term  := unary (('*' | '/') unary)*
///   unary := '-' unary | primary
///   primary := INT | NAME | FUNC '(' expr ',' expr ')' | '(' expr ')'
/// with FUNC one of cdiv, min, max. A name is a function only when followed
/// by '(', so a parameter may be called "min".
class GridParser {
public:
  GridParser(GridExpr &out, const std::vector<std::string> &names)
      : out_(out), src_(out.source_), names_(names) {}

  void run() {
    skipSpace();
    if (pos_ == src_.size())
      fail("empty expression");
    parseExpr();
    if (pos_ != src_.size())
      fail(std::string("unexpected '") + src_[pos_] + "'");
    size_t depth = 0, maxDepth = 0;
    for (const GridExpr::Instr &in : out_.code_) {
      bool push = in.op == Op::Const || in.op == Op::Slot;
      bool unary = in.op == Op::Neg;
      depth = push ? depth + 1 : unary ? depth : depth - 1;
      maxDepth = std::max(maxDepth, depth);
    }
    if (maxDepth > GridExpr::kMaxStack)
      fail("expression too deeply nested");
  }

private:
  using Op = GridExpr::Op;

  [[noreturn]] void fail(const std::string &what) const {
    throw Error(Error::Kind::Grid, out_.what_ + " '" + src_ + "': " + what +
                                       " at column " +
                                       std::to_string(pos_ + 1));
  }

  void skipSpace() {
    while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(
                                     src_[pos_])))
      ++pos_;
  }

  bool accept(char c) {
    skipSpace();
    if (pos_ < src_.size() && src_[pos_] == c) {
      ++pos_;
      skipSpace();
      return true;
    }
    return false;
  }

  void expect(char c) {
    if (!accept(c))
      fail(std::string("expected '") + c + "'");
  }

  void emit(Op op, int64_t value = 0) { out_.code_.push_back({op, value}); }

  void parseExpr() {
    parseTerm();
    while (true) {
      if (accept('+')) {
        parseTerm();
        emit(Op::Add);
      } else if (accept('-')) {
        parseTerm();
        emit(Op::Sub);
      } else {
        return;
      }
    }
  }

  void parseTerm() {
    parseUnary();
    while (true) {
      if (accept('*')) {
        parseUnary();
        emit(Op::Mul);
      } else if (accept('/')) {
        parseUnary();
        emit(Op::FloorDiv);
      } else {
        return;
      }
    }
  }

  void parseUnary() {
    // Bounds the recursion; real grid expressions nest two or three levels.
    if (++nesting_ > GridExpr::kMaxStack)
      fail("expression too deeply nested");
    if (accept('-')) {
      parseUnary();
      emit(Op::Neg);
    } else {
      parsePrimary();
    }
    --nesting_;
  }

  void parsePrimary() {
    skipSpace();
    if (pos_ == src_.size())
      fail("expected a number, a name or '('");
    char c = src_[pos_];
    if (accept('(')) {
      parseExpr();
      expect(')');
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = pos_;
      int64_t v = 0;
      while (pos_ < src_.size() &&
             std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, src_[pos_] - '0', &v)) {
          pos_ = start;
          fail("integer literal out of int64 range");
        }
        ++pos_;
      }
      emit(Op::Const, v);
      skipSpace();
      return;
    }
    if (!(std::isalpha(static_cast<unsigned char>(c)) || c == '_'))
      fail(std::string("unexpected '") + c + "'");
    size_t start = pos_;
    while (pos_ < src_.size() &&
           (std::isalnum(static_cast<unsigned char>(src_[pos_])) ||
            src_[pos_] == '_'))
      ++pos_;
    std::string name = src_.substr(start, pos_ - start);
    if (accept('(')) {
      Op op;
      if (name == "cdiv")
        op = Op::CDiv;
      else if (name == "min")
        op = Op::Min;
      else if (name == "max")
        op = Op::Max;
      else {
        pos_ = start;
        fail("unknown function '" + name + "' (known: cdiv, min, max)");
      }
      parseExpr();
      expect(',');
      parseExpr();
      expect(')');
      emit(op);
      return;
    }
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == name) {
        emit(Op::Slot, static_cast<int64_t>(i));
        bool seen = false;
        for (const auto &use : out_.names_)
          seen |= use.first == name;
        if (!seen)
          out_.names_.emplace_back(name, i);
        skipSpace();
        return;
      }
    }
    pos_ = start;
    std::string known;
    for (const std::string &n : names_)
      known += (known.empty() ? "" : ", ") + n;
    fail("unknown name '" + name + "' (integer parameters: " +
         (known.empty() ? "none" : known) + ")");
  }

  GridExpr &out_;
  const std::string &src_;
  const std::vector<std::string> &names_;
  size_t pos_ = 0;
  size_t nesting_ = 0;
};

GridExpr GridExpr::parse(const std::string &source,
                         const std::vector<std::string> &names,
                         const std::string &what) {
  GridExpr e;
  e.source_ = source;
  e.what_ = what;
  GridParser(e, names).run();
  return e;
}

std::string GridExpr::describe(const std::vector<int64_t> &slots) const {
  std::string s = what_ + " '" + source_ + "'";
  if (names_.empty())
    return s;
  s += " (";
  for (size_t i = 0; i < names_.size(); ++i)
    s += (i ? ", " : "") + names_[i].first + "=" +
         std::to_string(slots[names_[i].second]);
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
  for (const Instr &in : code_) {
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
