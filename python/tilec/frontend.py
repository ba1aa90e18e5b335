"""Python AST -> tile-dialect MLIR text.

`CodeGen` is an ``ast.NodeVisitor`` over one ``@tilec.jit`` function with its
constexpr values bound. It writes generic MLIR text in which every op carries
``loc("<file>":<line>:<col>)`` of the Python expression it came from, so the
compiler's diagnostics point back at the user's code.

The semantic layer (types, promotion, broadcasting) is the ``_binary`` /
``_coerce`` / ``_broadcast_to`` family; the rules are stated in
``tilec.language``'s docstring. Loop-carried variables of a ``for`` loop are
the names the body assigns that exist before the loop (found by a dry walk
of the body, as Triton does); they become ``scf.for`` iter_args and must keep
their type.
"""

import ast
import builtins
import hashlib
import inspect
import linecache
import math
import operator
import re
import struct
import sys
import textwrap
import types

from . import language as tl
from .errors import CompilationError


# ----------------------------------------------------------------------------
# Types


class TileTy:
    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    def __eq__(self, other):
        return isinstance(other, TileTy) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __str__(self):
        return "tensor<" + "".join(f"{d}x" for d in self.shape) + self.dtype.name + ">"


class PtrTy:
    def __init__(self, dtype):
        self.dtype = dtype

    def __eq__(self, other):
        return isinstance(other, PtrTy) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("ptr", self.dtype))

    def __str__(self):
        return f"!tile.ptr<{self.dtype.name}>"


class ViewTy:
    def __init__(self, dtype, rank):
        self.dtype = dtype
        self.rank = rank

    def __eq__(self, other):
        return isinstance(other, ViewTy) and (self.dtype, self.rank) == (other.dtype, other.rank)

    def __hash__(self):
        return hash(("view", self.dtype, self.rank))

    def __str__(self):
        return f"!tile.view<{self.dtype.name}, {self.rank}>"


def _shape(ty):
    return ty.shape if isinstance(ty, TileTy) else ()


def _with_dtype(ty, dtype):
    return TileTy(ty.shape, dtype) if isinstance(ty, TileTy) else dtype


def _is_numeric(ty):
    return isinstance(ty, (TileTy, tl.dtype))


class Value:
    """An SSA value. Its name is chosen when the text is rendered (from the
    Python variable it was first assigned to), so ops refer to it by marker."""

    def __init__(self, vid, ty, depth, hint=None):
        self.id = vid
        self.type = ty
        self.depth = depth  # nesting depth of the block that defines it
        self.hint = hint

    @property
    def ref(self):
        return f"\x00{self.id}\x00"

    @property
    def dtype(self):
        return self.type.dtype if isinstance(self.type, (TileTy, PtrTy, ViewTy)) else self.type

    @property
    def shape(self):
        return _shape(self.type)


class _BoundMethod:
    def __init__(self, name, value):
        self.name = name
        self.value = value


class _Block:
    def __init__(self, depth):
        self.depth = depth
        self.lines = []
        self.cache = {}


_CONST_TYPES = (bool, int, float, str, tl.dtype, type(None))


def _may_return(stmts):
    """Whether a `return` occurs anywhere in these statements."""
    return any(isinstance(sub, ast.Return) for stmt in stmts for sub in ast.walk(stmt))


def _is_const(x):
    return isinstance(x, _CONST_TYPES) or (isinstance(x, tuple) and all(_is_const(e) for e in x))


def _kind_of_const(x):
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int):
        return "int"
    if isinstance(x, float):
        return "float"
    return None


def _float_literal(x, dtype):
    """A float constant in MLIR syntax: decimal when exact and short, else hex bits."""
    if math.isfinite(x):
        text = repr(float(x))
        if "e" not in text and "n" not in text and struct.unpack("<f", struct.pack("<f", x))[0] == x:
            return text
    if dtype.name == "f32":
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
        return f"0x{bits:08X}"
    if dtype.name == "f16":
        bits = struct.unpack("<H", struct.pack("<e", x))[0]
        return f"0x{bits:04X}"
    # bf16: round the f32 bits to nearest even.
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if math.isnan(x):
        return "0x7FC0"
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return f"0x{bits:04X}"


def _literal(x, dtype):
    if dtype.kind == "bool":
        return "true" if x else "false"
    if dtype.is_int:
        return str(int(x))
    return _float_literal(float(x), dtype)


# Python operator -> (int op, float op)
_ARITH = {
    ast.Add: ("arith.addi", "arith.addf"),
    ast.Sub: ("arith.subi", "arith.subf"),
    ast.Mult: ("arith.muli", "arith.mulf"),
    ast.Div: (None, "arith.divf"),
    ast.FloorDiv: ("arith.divsi", None),
    ast.Mod: ("arith.remsi", "arith.remf"),
    ast.BitAnd: ("arith.andi", None),
    ast.BitOr: ("arith.ori", None),
    ast.BitXor: ("arith.xori", None),
    ast.LShift: ("arith.shli", None),
    ast.RShift: ("arith.shrsi", None),  # arithmetic, as Python's >> on signed integers
    "maximum": ("arith.maxsi", "arith.maximumf"),
    "minimum": ("arith.minsi", "arith.minimumf"),
}
_PY_BINOP = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.Pow: operator.pow,
}
_CMP = {
    ast.Lt: ("slt", "olt", operator.lt), ast.LtE: ("sle", "ole", operator.le),
    ast.Gt: ("sgt", "ogt", operator.gt), ast.GtE: ("sge", "oge", operator.ge),
    ast.Eq: ("eq", "oeq", operator.eq), ast.NotEq: ("ne", "une", operator.ne),
}
_MATH = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log,
         "log2": math.log2, "sqrt": math.sqrt, "tanh": math.tanh, "sin": math.sin,
         "cos": math.cos, "erf": math.erf}


def _const_math(name, x):
    """tl.<name>(x) of a Python number, with the IEEE results the kernel's
    own math gives (Python's math module raises instead): exp overflows to
    inf, log(0) is -inf, log and sqrt of negatives are nan."""
    try:
        return _MATH[name](x)
    except OverflowError:
        return math.inf
    except ValueError:
        if name in ("log", "log2") and x == 0:
            return -math.inf
        return math.nan


# Safe Python builtins usable on compile-time constants.
_PY_FUNCS = {"float": float, "int": int, "bool": bool, "min": min, "max": max,
             "abs": abs, "len": len, "range": range}
# Builtins over tuples, which may hold tiles (a tuple of tiles is a Python
# value of the generated code, e.g. one tile per head-dim piece): they run at
# generation time and give tuples.
_PY_TUPLE_FUNCS = {"zip": zip, "enumerate": enumerate, "tuple": tuple, "list": tuple,
                   "reversed": reversed}
# Ops with no side effects that cannot fault: they are placed in the outermost
# block their operands allow (loop-invariant code motion at generation time)
# and reused when the same op is asked for again.
_HOISTABLE = ("arith.constant", "tile.program_id", "tile.num_programs", "tile.splat", "tile.iota", "tile.expand_dims",
              "tile.broadcast", "arith.extsi", "arith.extui", "arith.trunci",
              "arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp",
              "arith.fptosi")


def _promote_dtypes(a, b):
    """The common dtype of two typed operands (see tilec.language)."""
    if a == b:
        return a
    if a.is_float and b.is_float:
        return tl.float32
    if a.is_float:
        return a
    if b.is_float:
        return b
    return a if a.bits >= b.bits else b


def _broadcast_shapes(node, shapes, gen):
    rank = builtins.max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            gen.error(node, "shapes " + ", ".join(_fmt_shape(s) for s in shapes)
                      + f" cannot be broadcast together (dimension {i}: {sorted(dims)})")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _fmt_shape(s):
    return "scalar" if not s else "[" + ", ".join(map(str, s)) + "]"


def _describe(x):
    if isinstance(x, Value):
        return str(x.type)
    return f"constant {x!r}"


# ----------------------------------------------------------------------------
# Plain Python functions called from kernels (score_mod, mask_mod, helpers)

_MAX_INLINE_DEPTH = 32
# Element types of tensors a Python function may capture.
_TENSOR_DTYPES = {"int32": tl.int32, "int64": tl.int64, "float16": tl.float16,
                  "bfloat16": tl.bfloat16, "float32": tl.float32}


class _Frame:
    """One Python function being inlined: where its body started (block
    depth) and what its `return` gave."""

    def __init__(self, fn, depth):
        self.fn = fn
        self.depth = depth
        self.value = None
        self.returned = False


_AST_CACHE = {}


def _function_ast(fn):
    """(ast.FunctionDef or ast.Lambda, filename, column shift) of a Python
    function, located in its source file; CompilationError without source."""
    code = fn.__code__
    cached = _AST_CACHE.get(code)
    if cached is not None:
        return cached
    filename = inspect.getsourcefile(fn) or code.co_filename
    where = f"'{fn.__qualname__}' ({filename}:{code.co_firstlineno})"
    if fn.__name__ == "<lambda>":
        # A lambda's lines need not parse alone (it sits inside a call):
        # parse the whole file and find the lambda by line and parameters.
        lines = linecache.getlines(filename)
        try:
            tree = ast.parse("".join(lines)) if lines else None
        except SyntaxError:
            tree = None
        if tree is None:
            raise CompilationError(f"cannot read the source of lambda {where}: tilec inlines "
                                   "functions from their source, so define them in a .py file")
        params = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
        found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)
                 and n.lineno == code.co_firstlineno
                 and [a.arg for a in n.args.args + n.args.kwonlyargs] == params]
        if len(found) > 1:  # several on one line: the one holding the code's positions
            spots = {(p[0], p[2]) for p in code.co_positions() if p[0] and p[2] is not None}
            found = [n for n in found if any(
                (n.lineno, n.col_offset) <= spot <= (n.end_lineno, n.end_col_offset)
                for spot in spots)]
        if len(found) != 1:
            raise CompilationError(f"cannot locate the source of lambda {where}: write it as a def")
        result = (found[0], filename, 0)
    else:
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise CompilationError(f"cannot read the source of {where} ({e}): tilec inlines "
                                   "functions from their source, so define them in a .py file") from None
        source = "".join(lines)
        dedented = textwrap.dedent(source)
        shift = len(lines[0]) - len(lines[0].lstrip()) if dedented != source else 0
        tree = ast.parse(dedented)
        ast.increment_lineno(tree, first - 1)
        fdef = tree.body[0]
        if not isinstance(fdef, ast.FunctionDef):
            raise CompilationError(f"cannot inline {where}: not a plain function definition")
        result = (fdef, filename, shift)
    _AST_CACHE[code] = result
    return result


def _is_tensor(x):
    mod = type(x).__module__
    return (mod.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter")) or \
        (mod == "numpy" and type(x).__name__ == "ndarray")


def _code_names(code):
    """Global names a code object and the code nested in it read, in order."""
    names = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names += _code_names(c)
    return names


def _reachable(fn, visit):
    """Calls visit(kind, name, value) for each closure cell and global a
    function reads, in a fixed order (closure, then globals by first use),
    recursing into the functions among them."""
    seen = set()

    def walk(f):
        if id(f) in seen:
            return
        seen.add(id(f))
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            visit("closure", name, value)
            if isinstance(value, types.FunctionType):
                walk(value)
        done = set()
        for name in _code_names(f.__code__):
            if name in done or name not in f.__globals__:
                continue
            done.add(name)
            value = f.__globals__[name]
            if inspect.ismodule(value) or isinstance(value, type):
                continue
            visit("global", name, value)
            if isinstance(value, types.FunctionType):
                walk(value)

    walk(fn)


def constexpr_functions(constexprs):
    """The Python functions among constexpr values (score_mod, mask_mod), by
    constexpr name: the roots whose captured tensors become parameters."""
    return [constexprs[n] for n in sorted(constexprs)
            if isinstance(constexprs[n], types.FunctionType)]


def captured_tensors(fns):
    """The tensors (1-D torch tensors or numpy arrays) that the functions
    `fns` capture, deduplicated, in the fixed order both the code generator
    (one pointer and one length parameter each, after the kernel's own) and a
    launcher (the arguments it appends) use."""
    out = []
    for fn in fns:
        def visit(kind, name, value):
            if (_is_tensor(value) and len(value.shape) == 1
                    and str(value.dtype).replace("torch.", "") in _TENSOR_DTYPES
                    and not any(value is t for t in out)):
                out.append(value)
        _reachable(fn, visit)
    return out


def _code_key(code, h):
    h.update(code.co_code)
    h.update(repr(code.co_varnames).encode())
    h.update(repr(code.co_names).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_key(c, h)
        else:
            h.update(repr(c).encode())


def static_key(value):
    """A stable key for a constexpr value. A Python function is keyed by its
    code and the values of every closure cell and global it reads
    (recursively), so two score_mods (or one whose captured window size
    changed) never share a compiled kernel; tensors it captures count by
    dtype and rank only (their contents are launch arguments)."""
    if not isinstance(value, types.FunctionType):
        return repr(value)
    h = hashlib.sha256()

    def add(v):
        if isinstance(v, types.FunctionType):
            h.update(f"fn {v.__module__}.{v.__qualname__} {v.__defaults__!r}".encode())
            _code_key(v.__code__, h)
        elif _is_tensor(v):
            h.update(f"tensor {v.dtype} {len(v.shape)}".encode())
        elif _is_const(v) or isinstance(v, (tl.ptr,)):
            h.update(repr(v).encode())
        else:  # an object the trace can only use by identity
            h.update(f"object {type(v).__qualname__} {id(v)}".encode())

    add(value)
    _reachable(value, lambda kind, name, v: (h.update(f"{kind} {name} ".encode()), add(v)))
    return f"<function {value.__qualname__} {h.hexdigest()[:16]}>"


def _torch_builtin(fn):
    """The tl builtin a torch function stands for (torch.where -> 'where'),
    so mods written for torch's flex_attention trace too; None otherwise."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for name in ("where", "exp", "exp2", "log", "log2", "sqrt", "abs", "maximum", "minimum",
                 "tanh", "sigmoid"):
        if getattr(torch, name, None) is fn:
            return name
    return None


# ----------------------------------------------------------------------------
# The code generator


class CodeGen(ast.NodeVisitor):
    def __init__(self, fn, constexprs, name, grid, variant):
        self.fn = fn
        self.filename = inspect.getsourcefile(fn) or "<unknown>"
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            # The DSL compiles the function's source text, which Python keeps
            # only for functions defined in files.
            raise CompilationError(
                f"cannot read the source of kernel '{fn.__name__}' ({e}): define @tilec.jit "
                "kernels in a .py file, not in an interactive session, exec() or python -c",
                self.filename, None, None) from None
        source = "".join(lines)
        dedented = textwrap.dedent(source)
        self.col_shift = len(lines[0]) - len(lines[0].lstrip()) if dedented != source else 0
        tree = ast.parse(dedented)
        ast.increment_lineno(tree, first - 1)
        self.fdef = tree.body[0]
        if not isinstance(self.fdef, ast.FunctionDef):
            raise CompilationError("@tilec.jit applies to a function", self.filename, first, 1)
        self.globals = fn.__globals__
        self.constexprs = dict(constexprs)
        self.kernel_name = name
        self.grid = grid
        self.variant = variant
        self.blocks = [_Block(0)]
        self.env = {}
        self.loop_locals = set()
        self.branch_locals = set()  # assigned in one branch of a run-time if only
        self.assign_site = {}
        self.next_id = 0
        self.params = []  # (name, type) of the runtime parameters, in order
        self.param_values = []
        self.positive = set()  # names of the parameters declared > 0 (tl.assume)
        self.values = []  # every Value created, for naming at render time
        self.frames = []  # _Frame of each Python function being inlined, innermost last
        # Index tiles known to be `start + 0..n-1` along one axis (q_idx,
        # kv_idx): value id -> (start terms, n, axis, rank); a captured tensor
        # indexed by one is a tile load (see visit_Subscript).
        self.ranges = {}
        # Tensors captured by the Python functions among the constexprs
        # (document ids): each becomes a pointer and a length parameter,
        # appended after the kernel's own (see captured_tensors()).
        self.captures = []  # (tensor, ptr Value, len Value)

    # -- diagnostics ---------------------------------------------------------

    def error(self, node, message):
        raise CompilationError(message, self.filename, getattr(node, "lineno", None),
                               getattr(node, "col_offset", 0) + 1 + self.col_shift)

    def loc(self, node):
        file = self.filename.replace("\\", "\\\\").replace('"', '\\"')
        return f'loc("{file}":{node.lineno}:{node.col_offset + 1 + self.col_shift})'

    # -- emission ------------------------------------------------------------

    def new_value(self, ty, depth=None, hint=None):
        self.next_id += 1
        v = Value(self.next_id, ty, len(self.blocks) - 1 if depth is None else depth, hint)
        self.values.append(v)
        return v

    def emit(self, node, text, operands, result_type):
        """Appends `<result> = <text> loc(...)`; returns the result (or None
        when result_type is None). Hoistable ops go to the outermost block
        that defines all their operands and are reused when repeated."""
        opname = text.split(" ", 1)[0]
        depth = len(self.blocks) - 1
        if opname in _HOISTABLE and result_type is not None:
            depth = builtins.max([v.depth for v in operands], default=0)
            key = (text, str(result_type))
            for block in self.blocks[: depth + 1]:
                if key in block.cache:
                    return block.cache[key]
        block = self.blocks[depth]
        if result_type is None:
            block.lines.append(f"{text} {self.loc(node)}")
            return None
        result = self.new_value(result_type, depth)
        block.lines.append(f"{result.ref} = {text} {self.loc(node)}")
        if opname in _HOISTABLE:
            block.cache[(text, str(result_type))] = result
        return result

    def constant(self, node, value, ty):
        """A scalar constant or a dense splat tile of type `ty`."""
        dtype = ty.dtype if isinstance(ty, TileTy) else ty
        if dtype.is_int and isinstance(value, float) and not value.is_integer():
            self.error(node, f"constant {value!r} is not an integer ({dtype.name})")
        lit = _literal(value, dtype)
        if isinstance(ty, TileTy):
            return self.emit(node, f"arith.constant dense<{lit}> : {ty}", [], ty)
        if dtype.kind == "bool":
            return self.emit(node, f"arith.constant {lit}", [], ty)
        return self.emit(node, f"arith.constant {lit} : {ty}", [], ty)

    # -- semantic layer: conversions, promotion, broadcasting ----------------

    def cast(self, node, v, dtype):
        src = v.dtype
        if src == dtype:
            return v
        if dtype.kind == "bool":
            self.error(node, f"cannot convert {v.type} to i1; compare instead (x != 0)")
        if src.is_float and dtype.is_float:
            if src.bits == dtype.bits:  # f16 <-> bf16 goes through f32
                v = self.cast(node, v, tl.float32)
                src = tl.float32
            op = "arith.extf" if dtype.bits > src.bits else "arith.truncf"
        elif src.is_int and dtype.is_int:
            op = ("arith.extui" if src.kind == "bool" else "arith.extsi") \
                if dtype.bits > src.bits else "arith.trunci"
        elif src.is_int:
            op = "arith.uitofp" if src.kind == "bool" else "arith.sitofp"
        else:
            op = "arith.fptosi"
        out_ty = _with_dtype(v.type, dtype)
        return self.emit(node, f"{op} {v.ref} : {v.type} to {out_ty}", [v], out_ty)

    def broadcast_to(self, node, v, shape):
        if v.shape == shape:
            return v
        if not v.shape:
            ty = TileTy(shape, v.dtype)
            return self.emit(node, f"tile.splat {v.ref} : {v.type} -> {ty}", [v], ty)
        if len(v.shape) > len(shape):
            self.error(node, f"cannot broadcast {v.type} to shape {_fmt_shape(shape)}")
        while len(v.shape) < len(shape):
            v = self.expand_dims(node, v, 0)
        for have, want in zip(v.shape, shape):
            if have != want and have != 1:
                self.error(node, f"cannot broadcast {v.type} to shape {_fmt_shape(shape)}")
        ty = TileTy(shape, v.dtype)
        return self.emit(node, f"tile.broadcast {v.ref} : {v.type} -> {ty}", [v], ty)

    def expand_dims(self, node, v, axis):
        shape = list(v.shape)
        shape.insert(axis, 1)
        ty = TileTy(shape, v.dtype)
        out = self.emit(node, f"tile.expand_dims {v.ref} along {axis} : {v.type} -> {ty}", [v], ty)
        rng = self.ranges.get(v.id)
        if rng is not None and rng[3] == 1:
            self.ranges[out.id] = (rng[0], rng[1], 1 - axis, 2)
        return out

    def coerce(self, node, x, dtype, shape):
        """`x` (a Value or a constant) as `dtype` with `shape`."""
        if isinstance(x, Value):
            if not _is_numeric(x.type):
                self.error(node, f"expected a number or a tile, got {x.type}")
            return self.broadcast_to(node, self.cast(node, x, dtype), shape)
        if _kind_of_const(x) is None:
            self.error(node, f"expected a number or a tile, got {x!r}")
        return self.constant(node, x, TileTy(shape, dtype) if shape else dtype)

    def common_dtype(self, node, operands):
        typed = [x.dtype for x in operands if isinstance(x, Value)]
        for x in operands:
            if isinstance(x, Value) and not _is_numeric(x.type):
                self.error(node, f"expected a number or a tile, got {x.type}")
        dtype = typed[0]
        for t in typed[1:]:
            dtype = _promote_dtypes(dtype, t)
        kinds = {_kind_of_const(x) for x in operands if not isinstance(x, Value)}
        if None in kinds:
            bad = [x for x in operands if not isinstance(x, Value) and _kind_of_const(x) is None]
            self.error(node, f"expected a number or a tile, got {bad[0]!r}")
        if "float" in kinds and not dtype.is_float:
            dtype = tl.float32
        return dtype

    def elementwise(self, node, key, a, b):
        """a <op> b for an _ARITH key, with promotion and broadcasting."""
        dtype = self.common_dtype(node, [a, b])
        if key is ast.Div and not dtype.is_float:
            dtype = tl.float32
        int_op, float_op = _ARITH[key]
        op = float_op if dtype.is_float else int_op
        if op in ("arith.addi", "arith.subi"):
            result = self._range_arith(node, op, a, b, dtype)
            if result is not None:
                return result
        if op is None:
            what = {ast.FloorDiv: "'//' needs integers; use '/' for floats",
                    ast.BitAnd: "'&' needs integers or booleans",
                    ast.BitOr: "'|' needs integers or booleans",
                    ast.BitXor: "'^' needs integers or booleans",
                    ast.LShift: "'<<' needs integers",
                    ast.RShift: "'>>' needs integers"}.get(key, "unsupported operand types")
            self.error(node, f"{what} (got {_describe(a)} and {_describe(b)})")
        shape = _broadcast_shapes(node, [_shape(x.type) if isinstance(x, Value) else () for x in (a, b)], self)
        a = self.coerce(node, a, dtype, shape)
        b = self.coerce(node, b, dtype, shape)
        return self.emit(node, f"{op} {a.ref}, {b.ref} : {a.type}", [a, b], a.type)

    def _range_arith(self, node, op, a, b, dtype):
        """range ± scalar stays a range (start moved), for captured_load.
        Emits exactly what elementwise() would; the new start is kept as
        terms and only materialized if a captured tensor is indexed by it."""
        ra = self.ranges.get(a.id) if isinstance(a, Value) else None
        rb = self.ranges.get(b.id) if isinstance(b, Value) and op == "arith.addi" else None
        rng, rv, other = (ra, a, b) if ra is not None else (rb, b, a)
        if rng is None or rv.dtype != dtype or _shape(getattr(other, "type", None)) \
                or not (isinstance(other, Value) or _kind_of_const(other) == "int"):
            return None
        shape = rv.shape
        a = self.coerce(node, a, dtype, shape)
        b = self.coerce(node, b, dtype, shape)
        result = self.emit(node, f"{op} {a.ref}, {b.ref} : {a.type}", [a, b], a.type)
        start, n, axis, rank = rng
        self.ranges[result.id] = (start + [(op == "arith.addi", other, node)], n, axis, rank)
        return result

    def _range_start(self, terms):
        """The scalar a range starts at (its terms added up)."""
        start = 0
        for positive, x, node in terms:
            start = self.binary(node, ast.Add() if positive else ast.Sub(), start, x)
        return start

    def compare(self, node, opcls, a, b):
        dtype = self.common_dtype(node, [a, b])
        ipred, fpred, _ = _CMP[opcls]
        shape = _broadcast_shapes(node, [_shape(x.type) if isinstance(x, Value) else () for x in (a, b)], self)
        a = self.coerce(node, a, dtype, shape)
        b = self.coerce(node, b, dtype, shape)
        if dtype.is_float:
            text = f"arith.cmpf {fpred}, {a.ref}, {b.ref} : {a.type}"
        else:
            text = f"arith.cmpi {ipred}, {a.ref}, {b.ref} : {a.type}"
        return self.emit(node, text, [a, b], _with_dtype(a.type, tl.int1))

    # -- statements ----------------------------------------------------------

    def generate(self):
        self.bind_params()
        body, _ = self.fold_returns(self.fdef.body)
        for stmt in body:
            self.visit(stmt)
        return self.render()

    def fold_returns(self, stmts):
        """Early exit as structured control flow: `if c: A; return` followed
        by B becomes `if c: A else: B` (and the mirror image for a returning
        else), recursively, so a kernel's IR has its one return at the end.
        An exit nested deeper (`if VARLEN: ...; if past_end: return`) moves
        the statements after the enclosing `if` into each of its branches
        that can fall through, and from there into the inner `if`'s
        non-returning side (a constexpr `if` keeps one branch, so nothing is
        emitted twice; a run-time one gets the rest in both branches).
        Returns (statements, whether they always end in a return)."""
        out = []
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, ast.Return):
                if stmt.value is not None:
                    self.error(stmt, "a kernel returns nothing; write results with tl.store")
                if i != len(stmts) - 1:
                    self.error(stmts[i + 1], "unreachable code after 'return'")
                return out, True
            if isinstance(stmt, ast.If):
                body, body_returns = self.fold_returns(stmt.body)
                orelse, else_returns = self.fold_returns(stmt.orelse)
                rest = stmts[i + 1:]
                if body_returns and else_returns and rest:
                    self.error(rest[0], "unreachable code after 'return'")
                if rest and (_may_return(stmt.body) or _may_return(stmt.orelse)):
                    # The rest runs only where the branch falls through.
                    if not body_returns:
                        body, body_returns = self.fold_returns(stmt.body + rest)
                    if not else_returns:
                        orelse, else_returns = self.fold_returns(stmt.orelse + rest)
                    out.append(ast.copy_location(ast.If(test=stmt.test, body=body, orelse=orelse), stmt))
                    return out, body_returns and else_returns
                out.append(ast.copy_location(ast.If(test=stmt.test, body=body, orelse=orelse), stmt))
                if body_returns and else_returns:
                    return out, True
                continue
            if isinstance(stmt, (ast.For, ast.While)):
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Return):
                        self.error(sub, "'return' inside a loop is not supported "
                                        "(an early exit goes before the loop)")
            out.append(stmt)
        return out, False

    def eval_static(self, node):
        """Evaluates an annotation or default in the function's globals plus
        the constexprs (annotations are read from the source, so `from
        __future__ import annotations` and undefined constexpr names are fine)."""
        ns = dict(self.globals)
        ns.update(self.constexprs)
        try:
            return eval(compile(ast.Expression(node), self.filename, "eval"), ns)
        except Exception as e:  # noqa: BLE001 - reported at the annotation
            self.error(node, f"cannot evaluate {ast.unparse(node)!r}: {e}")

    def bind_params(self):
        args = self.fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            self.error(self.fdef, "kernel parameters must be plain positional parameters")
        defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
        # Constexprs first: other annotations may name them (q: tl.ptr(DTYPE)).
        is_constexpr = {}
        for arg, default in zip(args.args, defaults):
            if arg.annotation is None:
                self.error(arg, f"parameter '{arg.arg}' needs an annotation "
                                "(tl.ptr(dtype), tl.int32, tl.int64, tl.float32 or tl.constexpr)")
            try:
                ann = self.eval_static(arg.annotation)
            except CompilationError:
                continue  # not a constexpr; evaluated (and reported) below
            if ann is tl.constexpr or isinstance(ann, tl.constexpr):
                is_constexpr[arg.arg] = True
                if arg.arg in self.constexprs:
                    value = self.constexprs[arg.arg]
                elif default is not None:
                    value = self.eval_static(default)
                else:
                    self.error(arg, f"constexpr parameter '{arg.arg}' has no value")
                self.constexprs[arg.arg] = value
                self.env[arg.arg] = value
        for arg in args.args:
            if arg.arg in is_constexpr:
                continue
            ann = self.eval_static(arg.annotation)
            if ann is None:
                # `x: tl.float32 if DROPOUT else None`: not a parameter of
                # this specialization (its signature omits it; a use of it
                # is "not defined").
                continue
            if isinstance(ann, tl.ptr):
                ty = PtrTy(ann.element)
            elif isinstance(ann, tl.dtype) and ann.name in ("i32", "i64", "f32"):
                ty = ann
            else:
                self.error(arg.annotation, f"parameter '{arg.arg}': unsupported annotation "
                                           f"{ast.unparse(arg.annotation)!r} (use tl.ptr(dtype), "
                                           "tl.int32, tl.int64, tl.float32 or tl.constexpr)")
            value = self.new_value(ty, 0, arg.arg)
            self.params.append((arg.arg, ty))
            self.param_values.append(value)
            self.env[arg.arg] = value
        unknown = set(self.constexprs) - {a.arg for a in args.args}
        if unknown:
            self.error(self.fdef, f"unknown constexpr parameter(s): {', '.join(sorted(unknown))}")
        for i, t in enumerate(captured_tensors(self.constexpr_functions())):
            dtype = _TENSOR_DTYPES[str(t.dtype).replace("torch.", "")]
            ptr = self.new_value(PtrTy(dtype), 0, f"capture{i}")
            length = self.new_value(tl.int32, 0, f"capture{i}_len")
            for n, v in ((f"capture{i}", ptr), (f"capture{i}_len", length)):
                self.params.append((n, v.type))
                self.param_values.append(v)
            self.captures.append((t, ptr, length, dtype))

    def constexpr_functions(self):
        return constexpr_functions(self.constexprs)

    def captured_load(self, node, tensor, index):
        """tensor[idx] for a tensor a Python function captured and an index
        tile `start + 0..n-1` (q_idx, kv_idx plus constants): a tile load."""
        entry = next((c for c in self.captures if c[0] is tensor), None)
        if entry is None:
            self.error(node, "a tensor indexed in a kernel must be 1-D of int32, int64, float16, "
                             "bfloat16 or float32 and captured by a constexpr function (score_mod, "
                             f"mask_mod), got shape {tuple(tensor.shape)} of {tensor.dtype}")
        _, ptr, length, dtype = entry
        rng = self.ranges.get(index.id) if isinstance(index, Value) else None
        if rng is None:
            self.error(node, f"a captured tensor can be indexed only by an index tile such as "
                             f"q_idx or kv_idx plus a scalar (got {_describe(index)}); "
                             "loading single elements needs scalar loads")
        terms, n, axis, rank = rng
        view = self.tl_view(node, [ptr, (length,), (1,)], {})
        tile = self.tl_load(node, [view, (self._range_start(terms),), (n,)], {})
        if rank == 2:
            tile = self.expand_dims(node, tile, 1 - axis)
        return tile

    def generic_visit(self, node):
        self.error(node, f"unsupported construct in a tilec kernel: {type(node).__name__}")

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.visit(node.value)

    def visit_Pass(self, node):
        pass

    def bind(self, target, value, node):
        if isinstance(target, ast.Name):
            if isinstance(value, Value) and value.hint is None:
                value.hint = target.id
            if isinstance(value, tuple):  # tiles in a tuple: named after it (qs0, qs1, ...)
                for i, e in enumerate(value):
                    if isinstance(e, Value) and e.hint is None:
                        e.hint = f"{target.id}{i}"
            self.env[target.id] = value
            self.assign_site[target.id] = node
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                self.error(node, f"cannot unpack {_describe(value)} into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.bind(t, v, node)
            return
        self.error(target, f"unsupported assignment target: {type(target).__name__}")

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.bind(target, value, node)

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            self.error(node.target, "only names can be updated in place")
        current = self.lookup(node.target, node.target.id)
        self.bind(node.target, self.binary(node, node.op, current, self.visit(node.value)), node)

    def visit_If(self, node):
        cond = self.visit(node.test)
        if isinstance(cond, Value):
            return self.runtime_if(node, cond)
        self.visit_stmts(node.body if cond else node.orelse)

    def visit_stmts(self, stmts):
        """Visits statements until an inlined function's `return` ran."""
        for stmt in stmts:
            if self.frames and self.frames[-1].returned:
                return
            self.visit(stmt)

    def runtime_if(self, node, cond):
        """`if` on a run-time scalar: scf.if. Variables assigned in a branch
        that exist before the `if`, or are assigned in both branches, become
        its results (and must have one type in both); the others are local
        to their branch. Scalars are uniform over a program, so every thread
        takes the same branch."""
        if not isinstance(cond.type, tl.dtype):
            self.error(node.test, f"'if' needs a scalar condition, got {cond.type} "
                                  "(for tiles, use tl.where)")
        if cond.dtype.kind != "bool":
            cond = self.compare(node.test, ast.NotEq, cond, 0)
        env_before, sites_before = dict(self.env), dict(self.assign_site)
        branches = []
        for stmts in (node.body, node.orelse):
            self.env, self.assign_site = dict(env_before), dict(sites_before)
            self.blocks.append(_Block(len(self.blocks)))
            for stmt in stmts:
                self.visit(stmt)
            branches.append((self.blocks.pop(), self.env, self.assign_site))
        (then_block, then_env, then_sites), (else_block, else_env, else_sites) = branches
        self.env, self.assign_site = dict(env_before), dict(sites_before)

        missing = object()
        names, yields = [], []
        for n in list(then_env) + [k for k in else_env if k not in then_env]:
            a, b = then_env.get(n, missing), else_env.get(n, missing)
            before = env_before.get(n, missing)
            if a is before and b is before:
                continue
            if a is missing or b is missing:
                self.branch_locals.add(n)
                continue
            site = then_sites.get(n) if a is not before else else_sites.get(n)
            site = site or node
            if not isinstance(a, Value) and not isinstance(b, Value) and type(a) is type(b) and a == b:
                self.env[n] = a
                continue
            for x in (a, b):
                if isinstance(x, Value) and not _is_numeric(x.type) or \
                        not isinstance(x, Value) and _kind_of_const(x) is None:
                    self.error(site, f"'{n}' is assigned {_describe(x)} in a run-time 'if'; only "
                                     "numbers and tiles can differ between its branches")
            if isinstance(a, Value) and isinstance(b, Value):
                if a.type != b.type:
                    self.error(site, f"'{n}' has type {a.type} in the 'if' branch and {b.type} "
                                     "in the 'else' branch; give both the same type")
                ty = a.type
            elif isinstance(a, Value) or isinstance(b, Value):
                ty = (a if isinstance(a, Value) else b).type
            else:
                kinds = {_kind_of_const(a), _kind_of_const(b)}
                ty = tl.float32 if "float" in kinds else tl.int32 if "int" in kinds else tl.int1
            pair = []
            for x, block in ((a, then_block), (b, else_block)):
                if not isinstance(x, Value):
                    self.blocks.append(block)  # coercions belong to the branch
                    x = self.coerce(site, x, ty.dtype if isinstance(ty, TileTy) else ty, _shape(ty))
                    self.blocks.pop()
                pair.append(x)
            names.append(n)
            yields.append(pair)

        types = ", ".join(str(p[0].type) for p in yields)
        results = [self.new_value(p[0].type, hint=n) for n, p in zip(names, yields)]
        head = f"scf.if {cond.ref}"
        if results:
            head = ", ".join(r.ref for r in results) + f" = {head} -> ({types})"
            then_block.lines.append(f"scf.yield {', '.join(p[0].ref for p in yields)} : {types} {self.loc(node)}")
            else_block.lines.append(f"scf.yield {', '.join(p[1].ref for p in yields)} : {types} {self.loc(node)}")
        out = self.blocks[-1].lines
        out.append(f"{head} {{")
        out.extend("  " + line for line in then_block.lines)
        if else_block.lines or results:
            out.append("} else {")
            out.extend("  " + line for line in else_block.lines)
        out.append(f"}} {self.loc(node)}")
        for n, r in zip(names, results):
            self.env[n] = r
            self.branch_locals.discard(n)

    def visit_Assert(self, node):
        cond = self.visit(node.test)
        if isinstance(cond, Value):
            self.error(node.test, "'assert' needs a compile-time condition")
        if not cond:
            msg = self.visit(node.msg) if node.msg is not None else ast.unparse(node.test)
            self.error(node, f"static assertion failed: {msg}")

    def visit_For(self, node):
        it = node.iter
        if node.orelse:
            self.error(node, "'for ... else' is not supported")
        is_range = isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
        if not (is_range and not it.keywords and 1 <= len(it.args) <= 3):
            seq = None if is_range else self.visit(it)
            if not isinstance(seq, tuple):
                self.error(it, "a tilec loop is 'for i in range(start, stop[, step])' (a run-time "
                               "loop) or 'for x in <tuple>' (unrolled at compile time)")
            return self.unrolled_for(node, seq)
        if not isinstance(node.target, ast.Name):
            self.error(node.target, "the loop variable must be a single name")
        bounds = [self.visit(a) for a in it.args]
        if len(bounds) == 1:
            bounds = [0] + bounds
        if len(bounds) == 2:
            bounds.append(1)
        for a, b in zip(it.args[-len(bounds):], bounds):
            if isinstance(b, Value) and (not isinstance(b.type, tl.dtype) or not b.type.is_int
                                         or b.type.kind == "bool"):
                self.error(a, f"loop bounds must be integers, got {b.type}")
            if not isinstance(b, Value) and _kind_of_const(b) != "int":
                self.error(a, f"loop bounds must be integers, got {b!r}")
        typed = [b.type for b in bounds if isinstance(b, Value)]
        iv_ty = tl.int64 if tl.int64 in typed else tl.int32
        lb, ub, step = (self.coerce(it, b, iv_ty, ()) for b in bounds)

        # Dry walk: names the body assigns that already hold a value are
        # carried, in the order they were first defined. A tuple holding
        # tiles is carried element by element (`arity`: its length).
        assigned = {sub.id for sub in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store)}
        carried = [n for n, v in self.env.items()
                   if n in assigned and n != node.target.id
                   and (isinstance(v, Value) or _kind_of_const(v) is not None
                        or isinstance(v, tuple) and any(isinstance(e, Value) for e in v))]
        arity = {n: len(self.env[n]) for n in carried if isinstance(self.env[n], tuple)}
        leaves = [(n, e) for n in carried
                  for e in (self.env[n] if n in arity else (self.env[n],))]
        inits = []
        for n, v in leaves:
            if not isinstance(v, Value):
                kind = _kind_of_const(v)
                if kind is None:
                    self.error(self.assign_site.get(n, node),
                               f"loop-carried tuple '{n}' holds {_describe(v)}; only numbers and "
                               "tiles can be carried")
                v = self.constant(node, v, {"bool": tl.int1, "int": tl.int32, "float": tl.float32}[kind])
            if not _is_numeric(v.type):
                self.error(self.assign_site.get(n, node),
                           f"loop-carried variable '{n}' must be a number or a tile, not {v.type}")
            inits.append(v)

        def pack(values):  # carried name -> its value(s), from the flat list
            out, it = {}, iter(values)
            for n in carried:
                out[n] = tuple(next(it) for _ in range(arity[n])) if n in arity else next(it)
            return out

        env_before = dict(self.env)
        sites_before = dict(self.assign_site)
        self.blocks.append(_Block(len(self.blocks)))
        iv = self.new_value(iv_ty, hint=node.target.id)
        args = [self.new_value(v.type, hint=n) for (n, _), v in zip(leaves, inits)]
        self.env[node.target.id] = iv
        self.env.update(pack(args))
        for stmt in node.body:
            self.visit(stmt)
        ys = []
        for n in carried:
            y = self.env[n]
            if n in arity:
                if not isinstance(y, tuple) or len(y) != arity[n]:
                    self.error(self.assign_site.get(n, node),
                               f"loop-carried tuple '{n}' changes inside the loop: {arity[n]} "
                               f"elements before the loop, {_describe(y) if not isinstance(y, tuple) else len(y)} here")
                ys.extend(y)
            else:
                ys.append(y)
        yields = []
        for (n, _), init, y in zip(leaves, inits, ys):
            if not isinstance(y, Value):
                y = self.coerce(self.assign_site.get(n, node), y, init.dtype, init.shape)
            if y.type != init.type:
                self.error(self.assign_site.get(n, node),
                           f"loop-carried variable '{n}' changes type inside the loop: "
                           f"{init.type} before the loop, {y.type} here")
            yields.append(y)
        body = self.blocks.pop()
        self.loop_locals |= {k for k in self.env if k not in env_before}
        self.env = env_before
        self.assign_site = sites_before

        types = ", ".join(str(v.type) for v in inits)
        results = [self.new_value(v.type, hint=n) for (n, _), v in zip(leaves, inits)]
        head = f"scf.for {iv.ref} = {lb.ref} to {ub.ref} step {step.ref}"
        if carried:
            head = (", ".join(r.ref for r in results) + " = " + head + " iter_args("
                    + ", ".join(f"{a.ref} = {v.ref}" for a, v in zip(args, inits))
                    + f") -> ({types})")
            body.lines.append(f"scf.yield {', '.join(y.ref for y in yields)} : {types} {self.loc(node)}")
        out = self.blocks[-1].lines
        out.append(f"{head} : {iv_ty} {{")
        out.extend("  " + line for line in body.lines)
        out.append(f"}} {self.loc(node)}")
        self.env.update(pack(results))

    def unrolled_for(self, node, seq):
        """`for x in <tuple>`: the body once per item, at compile time (the
        tuple may hold tiles: one per head-dim piece); names it assigns keep
        their last values, as in Python."""
        for item in seq:
            self.bind(node.target, item, node)
            self.visit_stmts(node.body)
            if self.frames and self.frames[-1].returned:
                return

    # -- expressions ---------------------------------------------------------

    def lookup(self, node, name):
        if name in self.env:
            return self.env[name]
        if name in self.branch_locals:
            self.error(node, f"'{name}' is assigned in only one branch of a run-time 'if' and is not "
                             "available after it (assign it before the 'if' or in both branches)")
        if name in self.loop_locals:
            self.error(node, f"'{name}' is defined inside a loop body and is not available "
                             "after the loop (assign it before the loop to carry it)")
        if name in self.globals:
            return self.globals[name]
        if name in _PY_FUNCS:
            return _PY_FUNCS[name]
        if name in _PY_TUPLE_FUNCS:
            return _PY_TUPLE_FUNCS[name]
        self.error(node, f"name '{name}' is not defined")

    def visit_Name(self, node):
        return self.lookup(node, node.id)

    def visit_Constant(self, node):
        return node.value

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    visit_List = visit_Tuple

    def visit_Slice(self, node):
        parts = [None if x is None else self.visit(x) for x in (node.lower, node.upper, node.step)]
        if not all(x is None or _kind_of_const(x) == "int" for x in parts):
            self.error(node, "a slice needs compile-time integer bounds")
        return slice(*parts)

    def visit_ListComp(self, node):
        """A comprehension over compile-time tuples, unrolled: a tuple (also
        for [...] and generator expressions). Its variables are local to it."""
        env_before, sites_before = dict(self.env), dict(self.assign_site)
        out = []

        def generate(i):
            if i == len(node.generators):
                out.append(self.visit(node.elt))
                return
            gen = node.generators[i]
            for item in self.unrolled_items(gen.iter):
                self.bind(gen.target, item, node)
                conds = [self.visit(c) for c in gen.ifs]
                if any(isinstance(c, Value) for c in conds):
                    self.error(node, "a comprehension's 'if' needs a compile-time condition")
                if all(conds):
                    generate(i + 1)

        try:
            generate(0)
        finally:
            self.env, self.assign_site = env_before, sites_before
        return tuple(out)

    visit_GeneratorExp = visit_ListComp

    def unrolled_items(self, iter_node):
        """The items of an unrolled loop or comprehension: a compile-time
        tuple (which may hold tiles), or range() of constants."""
        seq = self.visit(iter_node)
        if isinstance(seq, range):
            return tuple(seq)
        if not isinstance(seq, tuple):
            self.error(iter_node, f"an unrolled loop runs over a tuple, got {_describe(seq)}")
        return seq

    def visit_IfExp(self, node):
        cond = self.visit(node.test)
        if isinstance(cond, Value):
            self.error(node.test, "a conditional expression needs a compile-time condition; use tl.where")
        return self.visit(node.body if cond else node.orelse)

    def visit_Attribute(self, node):
        base = self.visit(node.value)
        if isinstance(base, Value):
            if node.attr == "dtype":
                return base.dtype
            if node.attr == "shape":
                return base.shape
            if node.attr == "T":
                return self.tl_trans(node, [base], {})
            if node.attr == "to":
                return _BoundMethod("to", base)
            self.error(node, f"{base.type} has no attribute '{node.attr}'")
        if inspect.ismodule(base) or isinstance(base, tl.dtype):
            if not hasattr(base, node.attr):
                self.error(node, f"{getattr(base, '__name__', base)!s} has no attribute '{node.attr}'")
            return getattr(base, node.attr)
        self.error(node, f"unsupported attribute access '.{node.attr}' on {_describe(base)}")

    def visit_Subscript(self, node):
        base = self.visit(node.value)
        idx = node.slice
        items = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        if isinstance(base, Value) and isinstance(base.type, TileTy):
            # Only x[:, None]-style indexing: ':' keeps a dimension, None adds one.
            kept = [i for i in items if isinstance(i, ast.Slice)]
            for i in items:
                if isinstance(i, ast.Slice):
                    if i.lower or i.upper or i.step:
                        self.error(i, "tiles can only be indexed with ':' and None")
                elif not (isinstance(i, ast.Constant) and i.value is None):
                    self.error(i, "tiles can only be indexed with ':' and None")
            if len(kept) != len(base.shape):
                self.error(node, f"index has {len(kept)} ':' for a rank-{len(base.shape)} tile {base.type}")
            v = base
            for axis, i in enumerate(items):
                if not isinstance(i, ast.Slice):
                    v = self.expand_dims(node, v, axis)
            return v
        index = self.visit(idx)
        if _is_tensor(base):
            return self.captured_load(node, base, index)
        if isinstance(base, tuple) and (_kind_of_const(index) == "int" or isinstance(index, slice)):
            try:  # a tuple (of constants or tiles) indexed or sliced at compile time
                return base[index]
            except IndexError:
                self.error(node, f"index {index} is out of range for a tuple of {len(base)}")
        if _is_const(base) and _is_const(index) and isinstance(base, (tuple, str)):
            return base[index]
        self.error(node, f"cannot index {_describe(base)}")

    def binary(self, node, opcls, a, b):
        if not isinstance(a, Value) and not isinstance(b, Value):
            if type(opcls) not in _PY_BINOP:
                self.error(node, f"unsupported operator {type(opcls).__name__}")
            try:
                return _PY_BINOP[type(opcls)](a, b)
            except Exception as e:  # noqa: BLE001
                self.error(node, f"constant expression failed: {e}")
        opkey = type(opcls)
        for p, off in ((a, b), (b, a)):
            if isinstance(p, Value) and isinstance(p.type, PtrTy):
                if opkey is not ast.Add:
                    self.error(node, f"only '+' applies to pointers (got {type(opcls).__name__})")
                if isinstance(off, Value):
                    if not (isinstance(off.type, tl.dtype) and off.type.name in ("i32", "i64")):
                        self.error(node, f"pointer offsets are i32 or i64 scalars, got {off.type}")
                elif _kind_of_const(off) != "int":
                    self.error(node, f"pointer offsets are integers, got {off!r}")
                else:
                    off = self.constant(node, off, tl.int64)
                return self.emit(node, f"tile.addptr {p.ref}, {off.ref} : {p.type}, {off.type}",
                                 [p, off], p.type)
        if opkey not in _ARITH:
            self.error(node, f"unsupported operator on tiles: {opkey.__name__}")
        return self.elementwise(node, opkey, a, b)

    def visit_BinOp(self, node):
        return self.binary(node, node.op, self.visit(node.left), self.visit(node.right))

    def visit_UnaryOp(self, node):
        x = self.visit(node.operand)
        if not isinstance(x, Value):
            ops = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                   ast.Invert: operator.invert}
            return ops[type(node.op)](x)
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, ast.USub):
            if x.dtype.is_float:
                return self.emit(node, f"arith.negf {x.ref} : {x.type}", [x], x.type)
            return self.elementwise(node, ast.Sub, 0, x)
        if isinstance(node.op, (ast.Not, ast.Invert)):
            if x.dtype.kind == "bool":
                return self.elementwise(node, ast.BitXor, x, True)
            if isinstance(node.op, ast.Invert) and x.dtype.is_int:
                return self.elementwise(node, ast.BitXor, x, -1)
        self.error(node, f"unsupported unary operator {type(node.op).__name__} on {x.type}")

    def visit_Compare(self, node):
        if len(node.ops) != 1:
            self.error(node, "chained comparisons are not supported; combine masks with '&'")
        a, b = self.visit(node.left), self.visit(node.comparators[0])
        op = type(node.ops[0])
        if op not in _CMP:
            if not isinstance(a, Value) and not isinstance(b, Value):
                py = {ast.Is: operator.is_, ast.IsNot: operator.is_not,
                      ast.In: lambda x, y: x in y, ast.NotIn: lambda x, y: x not in y}
                return py[op](a, b)
            self.error(node, f"unsupported comparison {op.__name__}")
        if not isinstance(a, Value) and not isinstance(b, Value):
            return _CMP[op][2](a, b)
        return self.compare(node, op, a, b)

    def visit_BoolOp(self, node):
        values = [self.visit(v) for v in node.values]
        if any(isinstance(v, Value) for v in values):
            self.error(node, "'and'/'or' need compile-time operands; combine masks with '&' and '|'")
        result = values[0]
        for v in values[1:]:
            result = (result and v) if isinstance(node.op, ast.And) else (result or v)
        return result

    def visit_Call(self, node):
        fn = self.visit(node.func)
        if isinstance(fn, _BoundMethod):
            args = [self.visit(a) for a in node.args]
            return self.tl_cast(node, [fn.value] + args, {})
        name = getattr(fn, "__tilec_builtin__", None)
        if name == "assume":  # reads its argument's syntax; evaluates nothing
            return self.tl_assume(node)
        args = [self.visit(a) for a in node.args]
        kwargs = {k.arg: self.visit(k.value) for k in node.keywords}
        if name is not None:
            return getattr(self, "tl_" + name)(node, args, kwargs)
        if fn is builtins.abs and any(isinstance(a, Value) for a in args):
            return self.tl_abs(node, args, kwargs)
        if fn is len and len(args) == 1 and isinstance(args[0], tuple) and not kwargs:
            return len(args[0])
        if any(fn is f for f in _PY_TUPLE_FUNCS.values()):
            if kwargs or not all(isinstance(a, tuple) or _kind_of_const(a) == "int" for a in args):
                self.error(node, f"{fn.__name__}() takes tuples inside a kernel (and enumerate a "
                                 "compile-time start)")
            return tuple(fn(*args))
        if getattr(fn, "__tilec_constexpr_function__", False):
            return self.call_constexpr_function(node, fn, args, kwargs)
        if any(fn is f for f in _PY_FUNCS.values()):
            if not all(_is_const(a) for a in args + list(kwargs.values())):
                self.error(node, f"{fn.__name__}() needs compile-time arguments inside a kernel")
            return fn(*args, **kwargs)
        torch_name = _torch_builtin(fn)
        if torch_name is not None and hasattr(self, "tl_" + torch_name):
            return getattr(self, "tl_" + torch_name)(node, args, kwargs)
        if isinstance(fn, types.FunctionType):
            return self.inline(node, fn, args, kwargs)
        what = getattr(fn, "__name__", _describe(fn))
        self.error(node, f"unsupported call to '{what}' in a tilec kernel "
                         "(only tl.* builtins, plain Python functions, and "
                         "float/int/min/max/abs/len on constants)")

    def call_constexpr_function(self, node, fn, args, kwargs):
        """A @tl.constexpr_function: run in Python on compile-time arguments
        (its result must be a compile-time value too)."""
        if not all(_is_const(a) for a in args + list(kwargs.values())):
            bad = next(a for a in args + list(kwargs.values()) if not _is_const(a))
            self.error(node, f"'{fn.__qualname__}' is a constexpr function: its arguments must be "
                             f"compile-time values, got {_describe(bad)}")
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            self.error(node, f"'{fn.__qualname__}' failed: {type(e).__name__}: {e}")
        if not _is_const(result):
            self.error(node, f"'{fn.__qualname__}' is a constexpr function and must return a "
                             f"compile-time value, got {type(result).__name__}")
        return result

    # -- plain Python functions, inlined -------------------------------------

    def inline(self, node, fn, args, kwargs):
        """Generates a plain Python function's body in place (score_mod,
        mask_mod, their helpers): its parameters bound to the caller's values,
        its free names read from its closure and globals, its `return <expr>`
        the call's value. Errors point at the function's own file and line,
        with a note at the call."""
        if any(f.fn is fn for f in self.frames):
            self.error(node, f"'{fn.__qualname__}' calls itself: recursion cannot be inlined")
        if len(self.frames) >= _MAX_INLINE_DEPTH:
            self.error(node, f"calls nested deeper than {_MAX_INLINE_DEPTH} functions")
        try:
            fnode, filename, col_shift = _function_ast(fn)
        except CompilationError as e:
            self.error(node, e.message)
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            self.error(node, f"calling '{fn.__qualname__}': {e}")
        bound.apply_defaults()
        env = {}
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                env[name] = cell.cell_contents
            except ValueError:  # a cell not yet filled
                pass
        env.update(bound.arguments)
        caller = (self.filename, self.col_shift, self.globals, self.env, self.loop_locals,
                  self.assign_site)
        call_site = f"{self.filename}:{node.lineno}:{node.col_offset + 1 + self.col_shift}"
        frame = _Frame(fn, len(self.blocks))
        self.frames.append(frame)
        self.filename, self.col_shift, self.globals = filename, col_shift, fn.__globals__
        self.env, self.loop_locals, self.assign_site = env, set(), {}
        try:
            if isinstance(fnode, ast.Lambda):
                frame.value = self.visit(fnode.body)
            else:
                self.visit_stmts(fnode.body)
        except CompilationError as e:
            e.notes.append(f"{call_site}: note: in '{fn.__qualname__}' called from here")
            e.args = (e._render(),)
            raise
        finally:
            self.frames.pop()
            (self.filename, self.col_shift, self.globals, self.env, self.loop_locals,
             self.assign_site) = caller
        return frame.value

    def visit_Return(self, node):
        if not self.frames:
            self.error(node, "'return' is only supported as the last statement of a kernel")
        frame = self.frames[-1]
        if len(self.blocks) != frame.depth:
            self.error(node, "'return' inside a loop or a run-time 'if' cannot be inlined; "
                             "assign a variable there (or use tl.where) and return it after")
        frame.value = self.visit(node.value) if node.value is not None else None
        frame.returned = True

    def visit_FunctionDef(self, node):
        self.error(node, "functions defined inside a kernel or an inlined function are not "
                         "supported; define them at module level (they are inlined when called)")

    visit_Lambda = visit_FunctionDef

    # -- builtins ------------------------------------------------------------

    def _args(self, node, name, args, kwargs, names, defaults=()):
        """Binds positional/keyword args to `names`; trailing ones may default."""
        bound = dict(zip(names, args))
        if len(args) > len(names):
            self.error(node, f"tl.{name}() takes at most {len(names)} arguments, got {len(args)}")
        for k, v in kwargs.items():
            if k not in names or k in bound:
                self.error(node, f"tl.{name}(): unexpected keyword argument '{k}'")
            bound[k] = v
        required = names[: len(names) - len(defaults)]
        for n, d in zip(names[len(required):], defaults):
            bound.setdefault(n, d)
        missing = [n for n in required if n not in bound]
        if missing:
            self.error(node, f"tl.{name}() missing argument(s): {', '.join(missing)}")
        return [bound[n] for n in names]

    def _const_int(self, node, value, what):
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(node, f"{what} must be a compile-time integer, got {_describe(value)}")
        return value

    def _tile(self, node, value, what):
        if not isinstance(value, Value) or not isinstance(value.type, TileTy):
            self.error(node, f"{what} must be a tile, got {_describe(value)}")
        return value

    def _axis(self, node, axis, rank):
        axis = self._const_int(node, axis, "axis")
        if not -rank <= axis < rank:
            self.error(node, f"axis {axis} is out of range for a rank-{rank} tile")
        return axis % rank

    def _scalar_of(self, node, x, dtype, what):
        """An i32/i64 scalar operand: constants become `dtype`; i32 values widen to i64."""
        if isinstance(x, Value):
            if not isinstance(x.type, tl.dtype) or not x.type.is_int or x.type.kind == "bool":
                self.error(node, f"{what} must be an integer scalar, got {x.type}")
            if x.type.bits > dtype.bits:
                self.error(node, f"{what} must be {dtype.name}, got {x.type}")
            return self.cast(node, x, dtype)
        self._const_int(node, x, what)
        return self.constant(node, x, dtype)

    def _grid_axis(self, node, args, kwargs, name):
        (axis,) = self._args(node, name, args, kwargs, ["axis"])
        axis = self._const_int(node, axis, "axis")
        if axis not in (0, 1, 2):
            self.error(node, f"grid axis must be 0, 1 or 2, got {axis}")
        return self.emit(node, f"tile.{name} {axis} : i32", [], tl.int32)

    def tl_assume(self, node):
        """tl.assume(x > 0) (or 0 < x) for a scalar parameter x: no op, the
        parameter gets {tile.positive}; the runtime rejects launches with x <= 0."""
        form = "tl.assume takes one condition 'x > 0' (or '0 < x') on a scalar kernel parameter x"
        if len(node.args) != 1 or node.keywords:
            self.error(node, form)
        cond = node.args[0]

        def is_zero(n):
            return (isinstance(n, ast.Constant) and type(n.value) in (int, float)
                    and n.value == 0)

        name = None
        if isinstance(cond, ast.Compare) and len(cond.ops) == 1:
            left, op, right = cond.left, cond.ops[0], cond.comparators[0]
            if isinstance(op, ast.Gt) and isinstance(left, ast.Name) and is_zero(right):
                name = left
            elif isinstance(op, ast.Lt) and is_zero(left) and isinstance(right, ast.Name):
                name = right
        if name is None:
            self.error(cond, f"{form}, got '{ast.unparse(cond)}'")
        value = self.env.get(name.id)
        if name.id in self.constexprs:
            self.error(name, f"tl.assume: '{name.id}' is a constexpr; check it with assert")
        if not any(value is p for p in self.param_values):
            what = "is reassigned before tl.assume" if name.id in dict(self.params) \
                else "is not a kernel parameter"
            self.error(name, f"tl.assume: '{name.id}' {what}")
        if value.type not in (tl.float32, tl.int32, tl.int64):
            self.error(name, f"tl.assume: parameter '{name.id}' is {value.type}; "
                             "only f32, i32 and i64 parameters can be declared positive")
        self.positive.add(name.id)

    def tl_program_id(self, node, args, kwargs):
        return self._grid_axis(node, args, kwargs, "program_id")

    def tl_num_programs(self, node, args, kwargs):
        return self._grid_axis(node, args, kwargs, "num_programs")

    def tl_arange(self, node, args, kwargs):
        start, end = self._args(node, "arange", args, kwargs, ["start", "end"])
        start = self._const_int(node, start, "tl.arange start")
        end = self._const_int(node, end, "tl.arange end")
        if end <= start:
            self.error(node, f"tl.arange({start}, {end}) is empty")
        ty = TileTy((end - start,), tl.int32)
        iota = self.emit(node, f"tile.iota : {ty}", [], ty)
        self.ranges[iota.id] = ([], end - start, 0, 1)
        return self.elementwise(node, ast.Add, iota, start) if start else iota

    def _shape_arg(self, node, shape, what):
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, tuple) or not shape or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
            self.error(node, f"{what} must be a tuple of positive compile-time integers, got {_describe(shape)}")
        return shape

    def _dtype_arg(self, node, dtype):
        if not isinstance(dtype, tl.dtype):
            self.error(node, f"expected a tl dtype, got {_describe(dtype)}")
        return dtype

    def tl_zeros(self, node, args, kwargs):
        shape, dtype = self._args(node, "zeros", args, kwargs, ["shape", "dtype"])
        return self.constant(node, 0, TileTy(self._shape_arg(node, shape, "shape"), self._dtype_arg(node, dtype)))

    def tl_full(self, node, args, kwargs):
        shape, value, dtype = self._args(node, "full", args, kwargs, ["shape", "value", "dtype"])
        shape = self._shape_arg(node, shape, "shape")
        return self.coerce(node, value, self._dtype_arg(node, dtype), shape)

    def tl_cdiv(self, node, args, kwargs):
        a, b = self._args(node, "cdiv", args, kwargs, ["a", "b"])
        if not isinstance(b, Value) and b == 0:
            self.error(node, f"tl.cdiv({_describe(a)}, 0): division by zero")
        if not isinstance(a, Value) and not isinstance(b, Value):
            return -(-a // b)
        if isinstance(b, Value):
            return self.elementwise(node, ast.FloorDiv,
                                    self.elementwise(node, ast.Sub, self.elementwise(node, ast.Add, a, b), 1), b)
        return self.elementwise(node, ast.FloorDiv, self.elementwise(node, ast.Add, a, b - 1), b)

    def tl_next_power_of_2(self, node, args, kwargs):
        (n,) = self._args(node, "next_power_of_2", args, kwargs, ["n"])
        n = self._const_int(node, n, "tl.next_power_of_2 argument")
        if n < 1:
            self.error(node, f"tl.next_power_of_2({n}): the argument must be positive")
        return 1 << (n - 1).bit_length()

    def tl_view(self, node, args, kwargs):
        base, sizes, strides, block = self._args(node, "view", args, kwargs,
                                                 ["ptr", "sizes", "strides", "block"], [None])
        if not isinstance(base, Value) or not isinstance(base.type, PtrTy):
            self.error(node, f"tl.view needs a pointer, got {_describe(base)}")
        sizes = sizes if isinstance(sizes, tuple) else (sizes,)
        strides = strides if isinstance(strides, tuple) else (strides,)
        if len(sizes) != len(strides) or not 1 <= len(sizes) <= 3:
            self.error(node, f"tl.view needs 1 to 3 sizes and as many strides, "
                             f"got {len(sizes)} sizes and {len(strides)} strides")
        attrs = ""
        if block is not None:
            block = block if isinstance(block, tuple) else (block,)
            if len(block) != len(sizes):
                self.error(node, f"tl.view block needs {len(sizes)} extents (one per dimension), "
                                 f"got {len(block)}")
            for e in block:
                e = self._const_int(node, e, "tl.view block extent")
                if e < 1 or e & (e - 1):
                    self.error(node, f"tl.view block extents must be powers of two, got {e}")
            attrs = f" {{block = array<i64: {', '.join(str(e) for e in block)}>}}"
        sz = [self._scalar_of(node, s, tl.int32, f"size {i}") for i, s in enumerate(sizes)]
        st = [self._scalar_of(node, s, tl.int64, f"stride {i}") for i, s in enumerate(strides)]
        ty = ViewTy(base.dtype, len(sizes))
        text = (f"tile.view {base.ref} sizes({', '.join(v.ref for v in sz)}) "
                f"strides({', '.join(v.ref for v in st)}){attrs} : {base.type} -> {ty}")
        return self.emit(node, text, [base] + sz + st, ty)

    def _view_and_offsets(self, node, view, offsets, what):
        if not isinstance(view, Value) or not isinstance(view.type, ViewTy):
            self.error(node, f"{what} needs a view (tl.view(...)), got {_describe(view)}")
        offsets = offsets if isinstance(offsets, tuple) else (offsets,)
        if len(offsets) != view.type.rank:
            self.error(node, f"{what}: a rank-{view.type.rank} view needs {view.type.rank} offsets, "
                             f"got {len(offsets)}")
        return [self._scalar_of(node, o, tl.int32, f"offset {i}") for i, o in enumerate(offsets)]

    def tl_load(self, node, args, kwargs):
        first = args[0] if args else kwargs.get("ptr")
        if isinstance(first, Value) and isinstance(first.type, PtrTy):
            return self._load_scalar(node, args, kwargs)
        view, offsets, shape, padding = self._args(
            node, "load", args, kwargs, ["view", "offsets", "shape", "padding"], ["zero"])
        offs = self._view_and_offsets(node, view, offsets, "tl.load")
        shape = self._shape_arg(node, shape, "tl.load shape")
        if len(shape) != view.type.rank:
            self.error(node, f"tl.load: shape {_fmt_shape(shape)} has rank {len(shape)}, "
                             f"the view has rank {view.type.rank}")
        if padding not in ("zero", "neg_inf", "nan"):
            self.error(node, f"tl.load padding must be 'zero', 'neg_inf' or 'nan', got {padding!r}")
        ty = TileTy(shape, view.dtype)
        text = (f"tile.load {view.ref}[{', '.join(o.ref for o in offs)}] padding = {padding} "
                f": {view.type} -> {ty}")
        return self.emit(node, text, [view] + offs, ty)

    def _load_scalar(self, node, args, kwargs):
        """tl.load(ptr + i[, volatile=True]): the one element at a pointer, as a scalar."""
        ptr, volatile = self._args(node, "load", args, kwargs, ["ptr", "volatile"], [False])
        if not isinstance(volatile, bool):
            self.error(node, f"tl.load volatile must be True or False, got {_describe(volatile)}")
        dtype = ptr.type.dtype
        if dtype.kind == "bool":
            self.error(node, f"tl.load of one element reads integers or floats, not {dtype.name}")
        return self.emit(node, f"tile.load_scalar {ptr.ref}{' volatile' * volatile} : {ptr.type} -> {dtype}",
                         [ptr], dtype)

    def _turn_counter(self, node, counter, fn):
        if not isinstance(counter, Value) or not isinstance(counter.type, PtrTy) or counter.dtype != tl.int32:
            self.error(node, f"tl.{fn} needs a pointer to int32 (the turn counter), got {_describe(counter)}")

    def tl_wait_turn(self, node, args, kwargs):
        """tl.wait_turn(counter_ptr, turn, seen=None): tile.wait_turn; without
        `seen`, the counter is read (volatile) right here."""
        counter, turn, seen = self._args(node, "wait_turn", args, kwargs, ["counter", "turn", "seen"], [None])
        self._turn_counter(node, counter, "wait_turn")
        if not isinstance(turn, Value) and (isinstance(turn, bool) or not isinstance(turn, int) or turn < 0):
            self.error(node, f"tl.wait_turn: turn must be an integer >= 0, got {_describe(turn)}")
        t = self._scalar_of(node, turn, tl.int32, "tl.wait_turn turn")
        if seen is None:
            seen = self._load_scalar(node, [counter], {"volatile": True})
        sn = self._scalar_of(node, seen, tl.int32, "tl.wait_turn seen")
        self.emit(node, f"tile.wait_turn {counter.ref}, {t.ref}, {sn.ref} : {counter.type}",
                  [counter, t, sn], None)

    def tl_pass_turn(self, node, args, kwargs):
        """tl.pass_turn(counter_ptr): tile.pass_turn."""
        (counter,) = self._args(node, "pass_turn", args, kwargs, ["counter"])
        self._turn_counter(node, counter, "pass_turn")
        self.emit(node, f"tile.pass_turn {counter.ref} : {counter.type}", [counter], None)

    def tl_barrier(self, node, args, kwargs):
        """tl.barrier(): tile.barrier."""
        self._args(node, "barrier", args, kwargs, [])
        self.emit(node, "tile.barrier", [], None)

    def tl_wait_prior_kernels(self, node, args, kwargs):
        """tl.wait_prior_kernels(): tile.wait_prior_kernels."""
        self._args(node, "wait_prior_kernels", args, kwargs, [])
        self.emit(node, "tile.wait_prior_kernels", [], None)

    def tl_launch_dependents(self, node, args, kwargs):
        """tl.launch_dependents(): tile.launch_dependents."""
        self._args(node, "launch_dependents", args, kwargs, [])
        self.emit(node, "tile.launch_dependents", [], None)

    def tl_store(self, node, args, kwargs):
        view, offsets, value = self._args(node, "store", args, kwargs, ["view", "offsets", "value"])
        offs = self._view_and_offsets(node, view, offsets, "tl.store")
        value = self._tile(node, value, "the stored value")
        if len(value.shape) != view.type.rank:
            self.error(node, f"tl.store: {value.type} has rank {len(value.shape)}, "
                             f"the view has rank {view.type.rank}")
        if value.dtype != view.dtype:
            self.error(node, f"tl.store: storing {value.type} into a view of {view.dtype.name}; "
                             f"convert with .to(tl.{tl._NAMES[view.dtype.name]})")
        self.emit(node, f"tile.store {value.ref}, {view.ref}[{', '.join(o.ref for o in offs)}] "
                        f": {value.type}, {view.type}", [value, view] + offs, None)

    def tl_atomic_add(self, node, args, kwargs):
        view, offsets, value = self._args(node, "atomic_add", args, kwargs, ["view", "offsets", "value"])
        offs = self._view_and_offsets(node, view, offsets, "tl.atomic_add")
        value = self._tile(node, value, "the added value")
        if view.dtype != tl.float32:
            self.error(node, f"tl.atomic_add: the view holds {view.dtype.name}; atomic adds are "
                             "f32 only (accumulate in an f32 buffer, convert afterwards)")
        if len(value.shape) != view.type.rank:
            self.error(node, f"tl.atomic_add: {value.type} has rank {len(value.shape)}, "
                             f"the view has rank {view.type.rank}")
        if value.dtype != tl.float32:
            self.error(node, f"tl.atomic_add: adding {value.type}; convert with .to(tl.float32)")
        self.emit(node, f"tile.atomic_add {value.ref}, {view.ref}[{', '.join(o.ref for o in offs)}] "
                        f": {value.type}, {view.type}", [value, view] + offs, None)

    def tl_arrive(self, node, args, kwargs):
        """tl.arrive(counter_ptr, expected): tile.arrive, an i1 scalar."""
        counter, expected = self._args(node, "arrive", args, kwargs, ["counter", "expected"])
        if not isinstance(counter, Value) or not isinstance(counter.type, PtrTy) or counter.dtype != tl.int32:
            self.error(node, f"tl.arrive needs a pointer to int32 (the counter), got {_describe(counter)}")
        if not isinstance(expected, Value) and (isinstance(expected, bool) or not isinstance(expected, int)
                                                or expected < 1):
            self.error(node, f"tl.arrive: expected arrivals must be an integer >= 1, got {_describe(expected)}")
        exp = self._scalar_of(node, expected, tl.int32, "tl.arrive expected")
        return self.emit(node, f"tile.arrive {counter.ref}, {exp.ref} : {counter.type}", [counter, exp], tl.int1)

    def tl_dot(self, node, args, kwargs):
        a, b, acc, trans_b, warps_n = self._args(node, "dot", args, kwargs,
                                                 ["a", "b", "acc", "trans_b", "warps_n"],
                                                 [None, False, 1])
        a = self._tile(node, a, "tl.dot operand a")
        b = self._tile(node, b, "tl.dot operand b")
        for what, x in (("a", a), ("b", b)):
            if len(x.shape) != 2:
                self.error(node, f"tl.dot operand {what} must be 2-D, got {x.type}")
            if x.dtype.name not in ("f16", "bf16"):
                self.error(node, f"tl.dot operand {what} must be f16 or bf16, got {x.type} "
                                 "(convert with .to(tl.float16))")
        if a.dtype != b.dtype:
            self.error(node, f"tl.dot operands differ in type: {a.type} and {b.type}")
        m, k = a.shape
        n, kb = b.shape if trans_b else b.shape[::-1]
        if k != kb:
            bt = "b (transposed)" if trans_b else "b"
            self.error(node, f"tl.dot: a is {m}x{k} but {bt} is {kb}x{n}: inner dimensions {k} != {kb}")
        acc_ty = TileTy((m, n), tl.float32)
        if acc is None:
            acc = self.constant(node, 0, acc_ty)
        acc = self._tile(node, acc, "tl.dot accumulator")
        if acc.type != acc_ty:
            self.error(node, f"tl.dot accumulator must be {acc_ty}, got {acc.type}")
        tb = " transpose_b" if trans_b else ""
        if isinstance(warps_n, bool) or not isinstance(warps_n, int) or warps_n < 1 \
                or warps_n & (warps_n - 1):
            self.error(node, f"tl.dot warps_n (warps along N) must be a constexpr power of two "
                             f">= 1, got {warps_n!r}")
        if warps_n != 1:  # a 2-D warp grid (tile.dot's warps_n); 1 is split-Q
            tb += f" {{warps_n = {warps_n} : i64}}"
        return self.emit(node, f"tile.dot {a.ref}, {b.ref}, {acc.ref}{tb} : {a.type}, {b.type} -> {acc_ty}",
                         [a, b, acc], acc_ty)

    def tl_trans(self, node, args, kwargs):
        (x,) = self._args(node, "trans", args, kwargs, ["x"])
        x = self._tile(node, x, "tl.trans operand")
        if len(x.shape) != 2:
            self.error(node, f"tl.trans needs a 2-D tile, got {x.type}")
        ty = TileTy(x.shape[::-1], x.dtype)
        return self.emit(node, f"tile.trans {x.ref} : {x.type} -> {ty}", [x], ty)

    def _reduce(self, node, args, kwargs, kind):
        x, axis = self._args(node, kind, args, kwargs, ["x", "axis"])
        x = self._tile(node, x, f"tl.{kind} operand")
        if not x.dtype.is_float:
            self.error(node, f"tl.{kind} reduces float tiles, got {x.type}")
        if len(x.shape) < 2:
            self.error(node, f"tl.{kind}: reducing a 1-D tile to a scalar is not supported")
        axis = self._axis(node, axis, len(x.shape))
        ty = TileTy(x.shape[:axis] + x.shape[axis + 1:], x.dtype)
        return self.emit(node, f"tile.reduce {kind} {x.ref} along {axis} : {x.type} -> {ty}", [x], ty)

    def tl_max(self, node, args, kwargs):
        return self._reduce(node, args, kwargs, "max")

    def tl_sum(self, node, args, kwargs):
        return self._reduce(node, args, kwargs, "sum")

    def tl_maximum(self, node, args, kwargs):
        a, b = self._args(node, "maximum", args, kwargs, ["a", "b"])
        if not isinstance(a, Value) and not isinstance(b, Value):
            return builtins.max(a, b)
        return self.elementwise(node, "maximum", a, b)

    def tl_minimum(self, node, args, kwargs):
        a, b = self._args(node, "minimum", args, kwargs, ["a", "b"])
        if not isinstance(a, Value) and not isinstance(b, Value):
            return builtins.min(a, b)
        return self.elementwise(node, "minimum", a, b)

    def _math(self, node, args, kwargs, name):
        (x,) = self._args(node, name, args, kwargs, ["x"])
        if not isinstance(x, Value):
            if _kind_of_const(x) not in ("int", "float"):
                self.error(node, f"tl.{name} needs a number or a tile, got {_describe(x)}")
            return _const_math(name, x)
        if not _is_numeric(x.type):
            self.error(node, f"tl.{name} needs a number or a tile, got {x.type}")
        if not x.dtype.is_float:
            x = self.cast(node, x, tl.float32)
        return self.emit(node, f"math.{name} {x.ref} : {x.type}", [x], x.type)

    def tl_exp(self, node, args, kwargs):
        return self._math(node, args, kwargs, "exp")

    def tl_exp2(self, node, args, kwargs):
        return self._math(node, args, kwargs, "exp2")

    def tl_log(self, node, args, kwargs):
        return self._math(node, args, kwargs, "log")

    def tl_log2(self, node, args, kwargs):
        return self._math(node, args, kwargs, "log2")

    def tl_sqrt(self, node, args, kwargs):
        return self._math(node, args, kwargs, "sqrt")

    def tl_tanh(self, node, args, kwargs):
        return self._math(node, args, kwargs, "tanh")

    def tl_sin(self, node, args, kwargs):
        return self._math(node, args, kwargs, "sin")

    def tl_cos(self, node, args, kwargs):
        return self._math(node, args, kwargs, "cos")

    def tl_erf(self, node, args, kwargs):
        return self._math(node, args, kwargs, "erf")

    def tl_abs(self, node, args, kwargs):
        (x,) = self._args(node, "abs", args, kwargs, ["x"])
        if not isinstance(x, Value):
            if _kind_of_const(x) not in ("int", "float"):
                self.error(node, f"tl.abs needs a number or a tile, got {_describe(x)}")
            return builtins.abs(x)
        if not _is_numeric(x.type) or x.dtype.kind == "bool":
            self.error(node, f"tl.abs needs a number or a tile, got {x.type}")
        op = "math.absf" if x.dtype.is_float else "math.absi"
        return self.emit(node, f"{op} {x.ref} : {x.type}", [x], x.type)

    def tl_sigmoid(self, node, args, kwargs):
        """1 / (1 + exp(-x)). The division carries `afn`: the GPU may use an
        approximate reciprocal (rcp.approx), as the exp uses ex2.approx."""
        (x,) = self._args(node, "sigmoid", args, kwargs, ["x"])
        if not isinstance(x, Value):
            if _kind_of_const(x) not in ("int", "float"):
                self.error(node, f"tl.sigmoid needs a number or a tile, got {_describe(x)}")
            return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0
        if not _is_numeric(x.type):
            self.error(node, f"tl.sigmoid needs a number or a tile, got {x.type}")
        if not x.dtype.is_float:
            x = self.cast(node, x, tl.float32)
        neg = self.emit(node, f"arith.negf {x.ref} : {x.type}", [x], x.type)
        e = self.emit(node, f"math.exp {neg.ref} : {x.type}", [neg], x.type)
        one = self.coerce(node, 1.0, x.dtype, x.shape)
        d = self.emit(node, f"arith.addf {e.ref}, {one.ref} : {x.type}", [e, one], x.type)
        return self.emit(node, f"arith.divf {one.ref}, {d.ref} fastmath<afn> : {x.type}",
                         [one, d], x.type)

    def tl_where(self, node, args, kwargs):
        cond, a, b = self._args(node, "where", args, kwargs, ["cond", "a", "b"])
        if not isinstance(cond, Value):
            if not isinstance(cond, bool):
                self.error(node, f"tl.where condition must be a boolean mask, got {_describe(cond)}")
            return a if cond else b
        if cond.dtype.kind != "bool":
            self.error(node, f"tl.where condition must be a boolean mask (i1), got {cond.type}")
        if not isinstance(a, Value) and not isinstance(b, Value):
            dtype = tl.float32 if "float" in (_kind_of_const(a), _kind_of_const(b)) else tl.int32
        else:
            dtype = self.common_dtype(node, [a, b])
        shape = _broadcast_shapes(node, [_shape(x.type) if isinstance(x, Value) else () for x in (cond, a, b)], self)
        cond = self.broadcast_to(node, cond, shape)
        a = self.coerce(node, a, dtype, shape)
        b = self.coerce(node, b, dtype, shape)
        types = f"{cond.type}, {a.type}" if shape else str(a.type)
        return self.emit(node, f"arith.select {cond.ref}, {a.ref}, {b.ref} : {types}", [cond, a, b], a.type)

    def tl_cast(self, node, args, kwargs):
        x, dtype = self._args(node, "cast", args, kwargs, ["x", "dtype"])
        dtype = self._dtype_arg(node, dtype)
        if not isinstance(x, Value):
            return self.constant(node, x, dtype)
        if not _is_numeric(x.type):
            self.error(node, f"cannot convert {x.type}")
        return self.cast(node, x, dtype)

    # -- rendering -----------------------------------------------------------

    def render(self):
        attrs = ["tile.kernel",
                 "tile.arg_names = [" + ", ".join(f'"{n}"' for n, _ in self.params) + "]",
                 "tile.grid = [" + ", ".join(f'"{g}"' for g in self.grid_exprs()) + "]"]
        if self.variant:
            attrs.append("tile.variant = {" + ", ".join(
                f"{k} = {_attr(v)}" for k, v in self.variant.items()) + "}")
        sig = ", ".join(f"{v.ref}: {v.type}" + (" {tile.positive}" if n in self.positive else "")
                        for (n, _), v in zip(self.params, self.param_values))
        lines = [f"func.func @{self.kernel_name}({sig})",
                 f"    attributes {{{', '.join(attrs)}}} {{"]
        lines += ["  " + line for line in self.blocks[0].lines]
        lines.append(f"  return {self.loc(self.fdef)}")
        lines.append(f"}} {self.loc(self.fdef)}")
        text = "\n".join(lines) + "\n"

        names = {}
        used = set()
        for v in self.param_values:
            names[v.id] = v.hint
            used.add(v.hint)
        hints = {}

        def name_of(m):
            vid = int(m.group(1))
            if vid not in names:
                base = hints.get(vid) or "t"
                cand, i = base, 1
                while cand in used:
                    cand, i = f"{base}_{i}", i + 1
                used.add(cand)
                names[vid] = cand
            return "%" + names[vid]

        for v in self.values:
            if v.hint:
                hints[v.id] = re.sub(r"[^A-Za-z0-9_]", "_", v.hint)
        return re.sub("\x00(\\d+)\x00", name_of, text)

    def grid_exprs(self):
        if self.grid is None:
            self.error(self.fdef, "@tilec.jit needs grid=(x, y, z) expressions")
        grid = tuple(self.grid)
        if len(grid) > 3 or not grid:
            self.error(self.fdef, f"grid has {len(grid)} dimensions; give 1 to 3")
        grid = grid + (1,) * (3 - len(grid))
        ints = [n for n, t in self.params if isinstance(t, tl.dtype) and t.is_int]
        return [_grid_expr(self, g, ints) for g in grid]


def _attr(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v} : i64"
    if isinstance(v, float):
        return f"{_float_literal(v, tl.float32) if not math.isfinite(v) else repr(v)} : f64"
    if isinstance(v, tl.dtype):
        return f'"{v.name}"'
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"unsupported tile.variant value {v!r}")


def _grid_expr(gen, expr, int_params):
    """Renders one grid dimension for tile.grid: an int, or an expression
    string in the grid language (tilec/runtime/GridSyntax.h: integers,
    integer parameters, + - * / //, cdiv/min/max), which the runtime
    extension's one parser checks and prints canonically with the integer
    constexprs substituted."""
    if isinstance(expr, int) and not isinstance(expr, bool):
        return str(expr)
    if not isinstance(expr, str):
        gen.error(gen.fdef, f"grid dimensions are ints or expression strings, got {expr!r}")
    constants = {k: v for k, v in gen.constexprs.items()
                 if isinstance(v, int) and not isinstance(v, bool)}
    params = [n for n in int_params if n not in constants]
    try:
        return _grid_syntax().grid_expr(expr, params, constants)
    except ValueError as e:
        gen.error(gen.fdef, f"grid expression {expr!r}: {e}")


def _grid_syntax():
    """The runtime extension, whose grid_expr is the grid language's parser
    (the compiler driver and the runtime use the same C++)."""
    try:
        from . import _tilec_runtime as rt  # installed by pip
    except ImportError:
        try:
            import _tilec_runtime as rt  # build tree: <build>/python on sys.path
        except ImportError as e:
            raise ImportError("tilec's frontend needs the runtime extension _tilec_runtime "
                              "for grid expressions (build it: scripts/build.sh "
                              "_tilec_runtime, or cmake -S lib/runtime)") from e
    return rt


def generate(fn, constexprs, name, grid, variant):
    """MLIR text and runtime parameter list [(name, type)] of `fn` specialized
    to `constexprs`."""
    gen = CodeGen(fn, constexprs, name, grid, variant)
    return gen.generate(), gen.params, gen.constexprs
