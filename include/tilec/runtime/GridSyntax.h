//===- GridSyntax.h - the grid-expression language, defined once ----------===//
//
// A kernel's launch grid is three integer expressions over its integer
// parameters. This is the one parser and printer of their text; everyone who
// reads or writes one goes through it:
//   - the DSL frontend (python/tilec/frontend.py, through the runtime
//     extension's `grid_expr`) turns the user's `grid=(...)` strings into the
//     canonical text of `tile.grid`, constexprs substituted;
//   - the compiler driver (lib/Driver/Manifest.cpp) checks `tile.grid`
//     against the kernel's integer parameters before writing the manifest;
//   - the runtime (lib/runtime/Grid.cpp) compiles a manifest's grid to the
//     postfix program it evaluates at every launch.
//
// Grammar (whitespace between tokens is free):
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/' | '//') unary)*      both divisions floor
//   unary   := '-' unary | primary
//   primary := INT | NAME | FUNC '(' expr ',' expr ')' | '(' expr ')'
// with FUNC one of cdiv, min, max. A name is a function only when followed
// by '(', so a parameter may be called "min". The canonical text (print)
// writes binary operators with one space either side, '/' for division,
// parentheses only where precedence needs them, and functions as
// "f(a, b)".
//
// Plain C++17 with no exceptions and no LLVM: it is built into both the
// runtime (which needs neither) and the compiler (built without exceptions).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_RUNTIME_GRIDSYNTAX_H
#define TILEC_RUNTIME_GRIDSYNTAX_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tilec::grid {

enum class Op { Const, Slot, Neg, Add, Sub, Mul, FloorDiv, CDiv, Min, Max };

struct Instr {
  Op op;
  int64_t value; ///< the constant, or the slot index
};

/// Deepest evaluation stack (and nesting) an expression may need.
inline constexpr size_t kMaxStack = 64;

/// A parsed expression: postfix code whose Slot i reads value i of the
/// names it was parsed against.
struct Program {
  std::vector<Instr> code;
  /// The names the expression uses, each once, with its slot, in order of
  /// first use.
  std::vector<std::pair<std::string, size_t>> names;
};

struct ParseError {
  std::string message; ///< e.g. "unknown name 'x' (integer parameters: a)"
  size_t column = 0;   ///< 1-based
};

/// Parses `source`; name i of `names` becomes slot i. Returns the program, or
/// nullopt with `error` set.
std::optional<Program> parse(const std::string &source, const std::vector<std::string> &names,
                             ParseError &error);

/// The canonical text of `program`, slot i printed as `names[i]`, or as the
/// integer `constants[i]` where that has a value (constexprs substituted).
std::string print(const Program &program, const std::vector<std::string> &names,
                  const std::vector<std::optional<int64_t>> &constants = {});

} // namespace tilec::grid

#endif
