//===- GridSyntax.cpp - the grid-expression language, defined once --------===//
#include "tilec/runtime/GridSyntax.h"

#include <algorithm>
#include <cctype>

namespace tilec::grid {

namespace {

/// Recursive descent to postfix code (grammar in GridSyntax.h). Every parse
/// function returns false after recording the first error.
class Parser {
public:
  Parser(const std::string &src, const std::vector<std::string> &names, Program &out,
         ParseError &error)
      : src_(src), names_(names), out_(out), error_(error) {}

  bool run() {
    skipSpace();
    if (pos_ == src_.size())
      return fail("empty expression");
    if (!parseExpr())
      return false;
    if (pos_ != src_.size())
      return fail(std::string("unexpected '") + src_[pos_] + "'");
    size_t depth = 0, maxDepth = 0;
    for (const Instr &in : out_.code) {
      bool push = in.op == Op::Const || in.op == Op::Slot;
      bool unary = in.op == Op::Neg;
      depth = push ? depth + 1 : unary ? depth : depth - 1;
      maxDepth = std::max(maxDepth, depth);
    }
    if (maxDepth > kMaxStack)
      return fail("expression too deeply nested");
    return true;
  }

private:
  bool fail(const std::string &what) {
    error_.message = what;
    error_.column = pos_ + 1;
    return false;
  }

  void skipSpace() {
    while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_])))
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

  bool expect(char c) { return accept(c) || fail(std::string("expected '") + c + "'"); }

  void emit(Op op, int64_t value = 0) { out_.code.push_back({op, value}); }

  bool parseExpr() {
    if (!parseTerm())
      return false;
    while (true) {
      Op op;
      if (accept('+'))
        op = Op::Add;
      else if (accept('-'))
        op = Op::Sub;
      else
        return true;
      if (!parseTerm())
        return false;
      emit(op);
    }
  }

  bool parseTerm() {
    if (!parseUnary())
      return false;
    while (true) {
      Op op;
      if (accept('*')) {
        op = Op::Mul;
      } else if (accept('/')) {
        accept('/'); // '//' (Python's spelling) is the same floor division
        op = Op::FloorDiv;
      } else {
        return true;
      }
      if (!parseUnary())
        return false;
      emit(op);
    }
  }

  bool parseUnary() {
    // Bounds the recursion; real grid expressions nest two or three levels.
    if (++nesting_ > kMaxStack)
      return fail("expression too deeply nested");
    bool ok;
    if (accept('-')) {
      ok = parseUnary();
      if (ok)
        emit(Op::Neg);
    } else {
      ok = parsePrimary();
    }
    --nesting_;
    return ok;
  }

  bool parsePrimary() {
    skipSpace();
    if (pos_ == src_.size())
      return fail("expected a number, a name or '('");
    char c = src_[pos_];
    if (accept('('))
      return parseExpr() && expect(')');
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = pos_;
      int64_t v = 0;
      while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, src_[pos_] - '0', &v)) {
          pos_ = start;
          return fail("integer literal out of int64 range");
        }
        ++pos_;
      }
      emit(Op::Const, v);
      skipSpace();
      return true;
    }
    if (!(std::isalpha(static_cast<unsigned char>(c)) || c == '_'))
      return fail(std::string("unexpected '") + c + "'");
    size_t start = pos_;
    while (pos_ < src_.size() &&
           (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
      ++pos_;
    std::string name = src_.substr(start, pos_ - start);
    if (accept('(')) {
      Op op;
      if (name == "cdiv") {
        op = Op::CDiv;
      } else if (name == "min") {
        op = Op::Min;
      } else if (name == "max") {
        op = Op::Max;
      } else {
        pos_ = start;
        return fail("unknown function '" + name + "' (known: cdiv, min, max)");
      }
      if (!parseExpr() || !expect(',') || !parseExpr() || !expect(')'))
        return false;
      emit(op);
      return true;
    }
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] != name)
        continue;
      emit(Op::Slot, static_cast<int64_t>(i));
      if (std::none_of(out_.names.begin(), out_.names.end(),
                       [&](const auto &use) { return use.first == name; }))
        out_.names.emplace_back(name, i);
      skipSpace();
      return true;
    }
    pos_ = start;
    std::string known;
    for (const std::string &n : names_)
      known += (known.empty() ? "" : ", ") + n;
    return fail("unknown name '" + name + "' (integer parameters: " +
                (known.empty() ? "none" : known) + ")");
  }

  const std::string &src_;
  const std::vector<std::string> &names_;
  Program &out_;
  ParseError &error_;
  size_t pos_ = 0;
  size_t nesting_ = 0;
};

} // namespace

std::optional<Program> parse(const std::string &source, const std::vector<std::string> &names,
                             ParseError &error) {
  Program program;
  if (!Parser(source, names, program, error).run())
    return std::nullopt;
  return program;
}

std::string print(const Program &program, const std::vector<std::string> &names,
                  const std::vector<std::optional<int64_t>> &constants) {
  // Rebuilds the text from the postfix code, each entry with its precedence:
  // 1 for + -, 2 for * /, 3 for what never needs parentheses.
  struct Text {
    std::string text;
    int prec;
    Op top = Op::Const; ///< the operator applied last
  };
  std::vector<Text> stack;
  for (const Instr &in : program.code) {
    switch (in.op) {
    case Op::Const:
      stack.push_back({std::to_string(in.value), 3, Op::Const});
      break;
    case Op::Slot: {
      size_t slot = static_cast<size_t>(in.value);
      if (slot < constants.size() && constants[slot])
        stack.push_back({std::to_string(*constants[slot]), 3, Op::Const});
      else
        stack.push_back({slot < names.size() ? names[slot] : "?", 3, Op::Slot});
      break;
    }
    case Op::Neg: {
      Text &x = stack.back();
      x.text = "-" + (x.prec == 3 ? x.text : "(" + x.text + ")");
      x.prec = 3;
      x.top = Op::Neg;
      break;
    }
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::FloorDiv: {
      Text rhs = std::move(stack.back());
      stack.pop_back();
      Text &lhs = stack.back();
      bool additive = in.op == Op::Add || in.op == Op::Sub;
      int prec = additive ? 1 : 2;
      const char *sym = in.op == Op::Add   ? "+"
                        : in.op == Op::Sub ? "-"
                        : in.op == Op::Mul ? "*"
                                           : "/";
      // Left-associative: a right operand of equal precedence keeps its
      // parentheses under - and / (a - (b - c)) and when it is a floor
      // division (a * (b / c) is not a * b / c); else they go (a + (b - c)).
      bool parenRhs = rhs.prec < prec ||
                      (rhs.prec == prec && (in.op == Op::Sub || in.op == Op::FloorDiv ||
                                            rhs.top == Op::FloorDiv));
      std::string left = lhs.prec < prec ? "(" + lhs.text + ")" : lhs.text;
      std::string right = parenRhs ? "(" + rhs.text + ")" : rhs.text;
      lhs.text = left + " " + sym + " " + right;
      lhs.prec = prec;
      lhs.top = in.op;
      break;
    }
    case Op::CDiv:
    case Op::Min:
    case Op::Max: {
      Text rhs = std::move(stack.back());
      stack.pop_back();
      Text &lhs = stack.back();
      const char *fn = in.op == Op::CDiv ? "cdiv" : in.op == Op::Min ? "min" : "max";
      lhs.text = std::string(fn) + "(" + lhs.text + ", " + rhs.text + ")";
      lhs.prec = 3;
      lhs.top = in.op;
      break;
    }
    }
  }
  return stack.empty() ? std::string() : stack.back().text;
}

} // namespace tilec::grid
