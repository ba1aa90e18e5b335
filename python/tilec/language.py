"""The tile language used inside ``@tilec.jit`` functions (import it as ``tl``).

Everything here is a marker: the functions are never called at run time. The
code generator (``tilec.frontend``) reads the kernel's Python AST and turns
each call of one of these builtins into tile-dialect MLIR.

Values inside a kernel are scalars (i1, i32, i64, f16, bf16, f32), tiles
(statically shaped tensors of those), pointers and views. Python literals and
``constexpr`` parameters are compile-time constants.

Type promotion in arithmetic (``+ - * / // % & | ^``, comparisons,
``maximum``/``minimum``, ``where``):

* A compile-time constant (Python int/float/bool, a constexpr) takes the type
  of the other operand: ``x * 2`` keeps x's type; a float constant with an
  integer operand converts that operand to f32.
* Two typed operands of the same kind promote to the wider type: i32 with i64
  gives i64 (sign-extended), f16 or bf16 with f32 gives f32, f16 with bf16
  gives f32. An integer with a float converts the integer to the float type.
* ``/`` is true division (integers convert to f32); ``//`` and ``%`` on
  integers are ``arith.divsi``/``arith.remsi``: they truncate toward zero,
  like C and Triton, not like Python.
* Shapes broadcast like numpy: scalars splat (``tile.splat``), missing leading
  dimensions are inserted (``tile.expand_dims``), and size-1 dimensions are
  repeated (``tile.broadcast``). ``x[:, None]`` / ``x[None, :]`` insert a unit
  dimension explicitly.

Control flow: ``for i in range(start, stop[, step])`` is a loop (names it
reassigns are carried; a name holding a tuple of tiles is carried element by
element). ``for x in <tuple>`` and comprehensions over tuples are unrolled at
compile time; tuples may hold tiles (one per head-dim piece, say) and are
indexed, sliced, ``zip``-ped and ``enumerate``-d with compile-time indices. ``if`` on a compile-time value keeps one branch; on a
run-time scalar (a parameter, a program id, a value read with
``tl.load(ptr + i)``) it is a branch taken by the whole program: a name
assigned in a branch that exists before the ``if``, or in both branches, has
the branch's value afterwards (one type in both), other names stay local to
their branch. ``return`` may end a branch outside loops: an early exit, e.g.
``if row0 >= seqlen_q: return`` for the programs past a short sequence.

Parameters whose annotation evaluates to None (``x: tl.float32 if DROPOUT
else None``, constexprs in scope) are not parameters of that specialization:
its signature omits them, and a use of the name is an error.

``<<`` and ``>>`` on integers are ``arith.shli`` / ``arith.shrsi`` (``>>``
is arithmetic, as Python's on signed integers; mask with ``&`` for a logical
shift). ``tl.philox``, ``tl.randint`` and ``tl.rand`` (below) are plain
functions over these ops: counter-based random numbers.
"""


class dtype:
    """A scalar element type; ``name`` is its MLIR spelling."""

    def __init__(self, name, kind, bits):
        self.name = name
        self.kind = kind  # "int", "float" or "bool"
        self.bits = bits

    @property
    def is_float(self):
        return self.kind == "float"

    @property
    def is_int(self):
        return self.kind in ("int", "bool")

    def __repr__(self):
        return f"tl.{_NAMES.get(self.name, self.name)}"

    def __str__(self):
        return self.name

    def __eq__(self, other):
        return isinstance(other, dtype) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


int1 = dtype("i1", "bool", 1)
int32 = dtype("i32", "int", 32)
int64 = dtype("i64", "int", 64)
float16 = dtype("f16", "float", 16)
bfloat16 = dtype("bf16", "float", 16)
float32 = dtype("f32", "float", 32)
_NAMES = {"i1": "int1", "i32": "int32", "i64": "int64", "f16": "float16",
          "bf16": "bfloat16", "f32": "float32"}
DTYPES = {d.name: d for d in (int1, int32, int64, float16, bfloat16, float32)}


class ptr:
    """Annotation of a pointer parameter: ``q: tl.ptr(tl.float16)``."""

    def __init__(self, element):
        if not isinstance(element, dtype):
            raise TypeError(f"tl.ptr expects a tl dtype, got {element!r}")
        self.element = element

    def __repr__(self):
        return f"tl.ptr({self.element!r})"


class constexpr:
    """Annotation of a compile-time parameter (block sizes, head dim, dtype,
    flags). Each distinct set of constexpr values is its own kernel."""


def _eager_module(args):
    """torch if any argument is a torch tensor, else numpy: the elementwise
    builtins also run eagerly on arrays, so one score_mod/mask_mod serves the
    compiler, a numpy reference and torch's flex_attention alike."""
    for a in args:
        if type(a).__module__.startswith("torch"):
            import torch

            return torch
    import numpy

    return numpy


# Elementwise builtins that run eagerly outside kernels: name -> the
# numpy/torch function name.
_EAGER = {"maximum": "maximum", "minimum": "minimum", "exp": "exp", "exp2": "exp2",
          "log": "log", "log2": "log2", "sqrt": "sqrt", "where": "where", "abs": "abs",
          "tanh": "tanh", "sin": "sin", "cos": "cos"}


def _builtin(fn):
    fn.__tilec_builtin__ = fn.__name__

    def stub(*args, **kwargs):
        eager = _EAGER.get(fn.__name__)
        if eager is not None and not kwargs:
            mod = _eager_module(args)
            if mod.__name__ == "torch" and fn.__name__ != "where":
                like = next(a for a in args if isinstance(a, mod.Tensor))
                args = [a if isinstance(a, mod.Tensor) else mod.tensor(a, dtype=like.dtype, device=like.device)
                        for a in args]
            return getattr(mod, eager)(*args)
        raise RuntimeError(f"tl.{fn.__name__} can only be used inside a @tilec.jit function"
                           + (" (the elementwise ones also run on numpy arrays and torch tensors)"
                              if eager is None else ""))

    stub.__tilec_builtin__ = fn.__name__
    stub.__doc__ = fn.__doc__
    stub.__name__ = fn.__name__
    return stub


def constexpr_function(fn):
    """Marks a plain Python function that a kernel calls on compile-time
    values: the compiler runs it in Python (any Python is allowed) instead of
    inlining it, and its result (a compile-time value: a number, a tuple of
    them, ...) is a constant of the kernel. Outside kernels it is `fn`
    (e.g. tilec.strategy.head_dim_pieces)."""
    fn.__tilec_constexpr_function__ = True
    return fn


@_builtin
def assume(cond):
    """Declares `x > 0` (or `0 < x`) for a scalar parameter x (f32, i32 or
    i64): the compiler may rely on it (a positive softmax scale needs no
    fallback loop) and every launch checks it. Emits no op."""


@_builtin
def program_id(axis):
    """Index of this program along grid axis 0, 1 or 2 (i32)."""


@_builtin
def num_programs(axis):
    """Grid size along axis 0, 1 or 2 (i32)."""


@_builtin
def arange(start, end):
    """The 1-D i32 tile start, ..., end-1 (constexpr bounds)."""


@_builtin
def zeros(shape, dtype):
    """A tile of zeros."""


@_builtin
def full(shape, value, dtype):
    """A tile with every element `value` (a constant or a scalar value)."""


@_builtin
def cdiv(a, b):
    """Ceiling division of integers: (a + b - 1) // b."""


@_builtin
def next_power_of_2(n):
    """The smallest power of two >= n, for a compile-time n (tile extents are
    powers of two; a view's runtime size bounds what is read and written)."""


@_builtin
def view(ptr, sizes, strides, block=None):
    """A strided window of global memory; sizes i32, strides i64 (elements).

    block (a tuple of compile-time powers of two, one per dimension): the
    memory is a grid of blocks of that shape, each stored contiguously and
    row-major, and `strides` step between blocks -- element (i, j) is at
    (i // b0)·strides[0] + (j // b1)·strides[1] + (i % b0)·b1 + j % b1. An
    f32 buffer that tl.atomic_add fills from a tl.dot result takes (8, 8):
    each warp's add then covers 256 contiguous bytes (2 L2 requests, 8 for
    a row-major tile). Read and written through registers only (not as a
    dot operand loaded into shared memory)."""


@_builtin
def load(view, offsets, shape, padding="zero"):
    """Load a tile of `shape` at element `offsets` of `view`; out-of-bounds
    elements read `padding` ("zero", "neg_inf" or "nan").

    ``tl.load(ptr + i)`` (a pointer, nothing else) reads the one element at
    the pointer as a scalar, usable as offsets, view sizes, loop bounds and in
    arithmetic (e.g. ``start = tl.load(cu_seqlens + b)``). It is not bounds
    checked: the element must be inside the buffer. ``volatile=True``: a
    fresh read of memory other programs change (a turn counter, see
    wait_turn), never cached or merged with another read."""


@_builtin
def store(view, offsets, value):
    """Store tile `value` at element `offsets` of `view`; out-of-bounds
    elements are not written."""


@_builtin
def atomic_add(view, offsets, value):
    """Add f32 tile `value` into the f32 `view` at element `offsets`, each
    element atomically (red.global.add.f32): programs may accumulate into the
    same elements, in no fixed order (not bitwise deterministic).
    Out-of-bounds elements are not touched."""


@_builtin
def arrive(counter, expected):
    """Count this program's arrival at the int32 `counter` (a pointer, e.g.
    ``counters + group``) after every write it made before; True in exactly
    one program, the `expected`-th to arrive, which also resets the counter
    to 0 and then sees what the other programs wrote before arriving. The
    result is uniform over the program (an ``if`` condition). Every program
    that uses a counter arrives on it exactly once, and exactly `expected`
    programs do (else the count stays behind for the next launch). Zero the
    counters once; they reset themselves."""


@_builtin
def wait_turn(counter, turn, seen=None):
    """Wait until the int32 turn `counter` (a pointer) is at least `turn`;
    afterwards this program sees every write the programs that passed the
    earlier turns made before passing (tl.pass_turn). With pass_turn it
    puts programs that update the same memory in a fixed order (e.g. f32
    atomic adds: bitwise deterministic sums without a buffer per program).
    Turns on one counter are 0, 1, 2, ..., each passed exactly once, and a
    program may wait only for programs that start before it: the GPU
    starts programs in order, program_id(0) counting down fastest, then
    program_id(1) and (2) counting up (the CPU runner runs them in that
    order and reports a wait no earlier program satisfies; on a GPU it
    would hang, and traps after tens of seconds). `seen`: the counter read
    earlier with ``tl.load(counter, volatile=True)``; when it is already
    `turn` or more the wait reads nothing (hide the read's latency behind
    work). Zero the counters before the launch."""


@_builtin
def pass_turn(counter):
    """Add one to the int32 turn `counter` after every write this program
    made before (tl.wait_turn)."""


@_builtin
def barrier():
    """Every thread of the program reaches this point before any goes on:
    what the program stored to global memory before it is seen by every
    load after it (e.g. rows a program writes into a buffer it then reads
    back through tl.load). Shared memory needs none: the compiler places
    those barriers. Nothing on the CPU runner."""


@_builtin
def wait_prior_kernels():
    """Wait until the kernels launched before this one on the stream have
    finished and their writes are visible. A kernel that calls it may be
    launched while the kernel ahead of it still runs (programmatic dependent
    launch, sm_90 and later): its programs start early and run what comes
    before the call meanwhile, which must therefore read nothing an earlier
    kernel writes and write nothing an earlier kernel reads. On sm_80 and
    the CPU runner it does nothing (kernels run one after another)."""


@_builtin
def launch_dependents():
    """Let the next kernel on the stream start its programs, if it waits
    with tl.wait_prior_kernels: once every program of this kernel has
    called it (or ended), they start on the SMs this kernel leaves free and
    wait there, so the next launch's latency hides behind this kernel's
    tail. Orders no memory. Nothing on sm_80 and the CPU runner."""


@_builtin
def dot(a, b, acc=None, trans_b=False, warps_n=1):
    """acc + a @ b (a @ b.T with trans_b); f16/bf16 in, f32 accumulator.
    warps_n > 1 (a constexpr power of two dividing num_warps) splits the
    result over a (num_warps / warps_n) x warps_n warp grid instead of rows
    only (split-Q); a is then read from shared memory."""


@_builtin
def trans(x):
    """Transpose a 2-D tile."""


@_builtin
def max(x, axis):
    """Maximum along `axis`."""


@_builtin
def sum(x, axis):
    """Sum along `axis`."""


@_builtin
def maximum(a, b):
    """Elementwise maximum."""


@_builtin
def minimum(a, b):
    """Elementwise minimum."""


@_builtin
def exp(x):
    """Elementwise e**x."""


@_builtin
def exp2(x):
    """Elementwise 2**x."""


@_builtin
def log(x):
    """Elementwise natural logarithm."""


@_builtin
def log2(x):
    """Elementwise base-2 logarithm."""


@_builtin
def sqrt(x):
    """Elementwise square root."""


@_builtin
def tanh(x):
    """Elementwise hyperbolic tangent (softcapping: c * tanh(s / c)). On the
    GPU tanh.approx.f32 (max relative error about 2^-11); f16/bf16 compute in
    f32."""


@_builtin
def sigmoid(x):
    """Elementwise 1 / (1 + e**-x); on the GPU ex2.approx and rcp.approx."""


@_builtin
def abs(x):
    """Elementwise |x| of a float or integer tile (or scalar)."""


@_builtin
def sin(x):
    """Elementwise sine. On the GPU the argument is reduced to [-pi, pi]
    (x - 2*pi*round(x / 2pi), two-part 2*pi) and sin.approx.f32 evaluates it:
    absolute error about 1e-6 for |x| up to ~1e5, growing with |x| beyond."""


@_builtin
def cos(x):
    """Elementwise cosine; on the GPU like `sin` (cos.approx.f32)."""


@_builtin
def erf(x):
    """Elementwise error function. The CPU runner evaluates it (libm); the
    GPU lowering has none yet, so a GPU compile is refused with an error at
    this call."""


@_builtin
def where(cond, a, b):
    """Elementwise cond ? a : b (arith.select), broadcasting all three."""


@_builtin
def cast(x, dtype):
    """Convert to `dtype` (same as x.to(dtype))."""


# -- Counter-based random numbers: Philox4x32-10 as plain tile arithmetic ------
#
# These are ordinary Python functions over the builtins above; the code
# generator inlines them where a kernel calls them (no op of their own, no
# lowering): u32 words are i32 bit patterns (add, xor, multiply wrap as
# unsigned), and mulhi is the upper half of an i64 product of the
# zero-extended words. Same generator and constants as Random123's
# philox4x32_10 (and Triton's tl.rand).

def _signed32(c):
    return c - (1 << 32) if c >= 1 << 31 else c


_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_PHILOX_M0_I32, _PHILOX_M1_I32 = _signed32(_PHILOX_M0), _signed32(_PHILOX_M1)


def _umulhi32(a, m):
    """The upper 32 bits of the unsigned product of i32 tile `a` and the
    constant m (< 2^32): the i64 product wraps, its bits 32..63 are exact."""
    return (((a.to(int64) & 0xFFFFFFFF) * m) >> 32).to(int32)


def _philox_round(c0, c1, c2, c3, k0, k1):
    hi0, lo0 = _umulhi32(c0, _PHILOX_M0), c0 * _PHILOX_M0_I32
    hi1, lo1 = _umulhi32(c2, _PHILOX_M1), c2 * _PHILOX_M1_I32
    return hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0


def philox(seed, c0, c1, c2, c3):
    """Philox4x32-10 of the counter (c0, c1, c2, c3) (i32 tiles of one shape,
    u32 bit patterns) under the 64-bit key `seed` (an i64 scalar: low word
    first): four i32 tiles of random bits."""
    seed = seed.to(int64)
    k0, k1 = seed.to(int32), (seed >> 32).to(int32)
    # Ten rounds, the key bumped (mod 2^32) before each after the first;
    # written out (a `for` would be a loop in the kernel, not unrolled).
    c0, c1, c2, c3 = _philox_round(c0, c1, c2, c3, k0, k1)
    c0, c1, c2, c3 = _philox_bumped(c0, c1, c2, c3, k0, k1, 1)
    c0, c1, c2, c3 = _philox_bumped(c0, c1, c2, c3, k0, k1, 2)
    c0, c1, c2, c3 = _philox_bumped(c0, c1, c2, c3, k0, k1, 3)
    c0, c1, c2, c3 = _philox_bumped(c0, c1, c2, c3, k0, k1, 4)
    c0, c1, c2, c3 = _philox_bumped(c0, c1, c2, c3, k0, k1, 5)
    c0, c1, c2, c3 = _philox_bumped(c0, c1, c2, c3, k0, k1, 6)
    c0, c1, c2, c3 = _philox_bumped(c0, c1, c2, c3, k0, k1, 7)
    c0, c1, c2, c3 = _philox_bumped(c0, c1, c2, c3, k0, k1, 8)
    return _philox_bumped(c0, c1, c2, c3, k0, k1, 9)


def _philox_bumped(c0, c1, c2, c3, k0, k1, n):
    """Round n (1..9): the key plus n times the Weyl constants, mod 2^32."""
    return _philox_round(c0, c1, c2, c3, k0 + _signed32((n * _PHILOX_W0) % (1 << 32)),
                         k1 + _signed32((n * _PHILOX_W1) % (1 << 32)))


def randint(seed, offsets):
    """32 random bits (an i32 tile) per element of the integer tile
    `offsets`: word 0 of philox(seed, (offset low word, high word, 0, 0))."""
    offsets = offsets.to(int64)
    c0 = offsets.to(int32)
    c1 = (offsets >> 32).to(int32)
    zero = c0 * 0
    word0, _, _, _ = philox(seed, c0, c1, zero, zero)
    return word0


def rand(seed, offsets):
    """A uniform f32 in [0, 1) per element of the integer tile `offsets`
    (counter-based: the same (seed, offset) gives the same number in every
    kernel): the top 24 bits of randint(seed, offsets) times 2^-24, so every
    value is exact and 1 is never reached."""
    bits = (randint(seed, offsets) >> 8) & 0xFFFFFF
    return bits.to(float32) * (1.0 / 16777216.0)
