"""tile-skip-warp-blocks on flash_fwd's window kernels, checked without a GPU.

The pass runs after tile-partition-warps, so the CPU runner never executes
its branches. Instead this test runs the GPU pipeline's tile passes up to and
including tile-skip-warp-blocks, then interprets the result's index
arithmetic (the scalar ops, and the index tiles of the masks) for every
program, warp and key block of small shapes: for each K/V loop it follows
the per-warp branches the pass made and evaluates the mask of the body the
warp takes. That mask, on the warp's rows, must equal the visibility written
from flash_attn's semantics here (bottom-right alignment: query i sees key j
iff i + sk - sq - left <= j <= i + sk - sq + right), and a warp may take the
skip branch only where it sees no key of the block. The blocks the loops run
must also cover every visible key of each row block (tile-split-masked-loops).
"""

import re

import numpy as np
import pytest

from tilec import compiler
from tilec import flash_attn as fa
from tilec import language as tl
from tilec.strategy import FlashConfig

needs_compiler = pytest.mark.skipif(not compiler.available(), reason="the _tilec extension is not built")

PIPELINE = ("builtin.module(tile-optimize,tile-lazy-rescale{{num-warps={w} min-registers=128}},"
            "tile-pipeline{{stages={s}}},tile-partition-warps{{num-warps={w}}},tile-allocate-shared,"
            "tile-insert-waits,tile-skip-warp-blocks{{full-warps={full}}})")
NEG_INF = "0xFF800000"


# -- a small interpreter of the printed IR's index arithmetic -------------------

def parse_regions(text):
    """The function body as a tree of (line, [then children], [else children])."""
    root = []
    lists, nodes = None, []
    for raw in text.splitlines():
        line = raw.strip()
        if lists is None:
            if line.startswith("func.func"):
                lists = [root]
            continue
        if line.startswith("} else {"):
            lists[-1] = nodes[-1][2]
            continue
        if line.startswith("}"):  # '}', '} {attrs}': a region ends
            lists.pop()
            if not lists:
                break
            nodes.pop()
            continue
        node = (line, [], [])
        lists[-1].append(node)
        if line.endswith("{"):
            lists.append(node[1])
            nodes.append(node)
    return root


def shape_of(type_text):
    m = re.search(r"tensor<((?:\d+x)+)(i\d+|f\d+|bf16)", type_text)
    return tuple(int(x) for x in m.group(1).rstrip("x").split("x")) if m else None


def c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ints(v):
    return v.astype(np.int64) if isinstance(v, np.ndarray) else v


def evaluate(line, env):
    """Evaluates one op line into env where its operands are known (else leaves it)."""
    m = re.match(r"(%[\w-]+)(?::\d+)? = ([\w.]+)\s*(.*)$", line)
    if not m:
        return
    name, op, rest = m.groups()
    operands = re.findall(r"%[\w#-]+", rest.split(":")[0])
    if any(o not in env for o in operands):
        return
    vals = [env[o] for o in operands]
    result_type = rest.rsplit(":", 1)[-1]
    if op == "arith.constant":
        if "dense<true>" in rest:
            env[name] = np.ones(shape_of(result_type), bool)
        elif "dense<false>" in rest:
            env[name] = np.zeros(shape_of(result_type), bool)
        elif re.match(r"dense<(-?\d+)>", rest) and re.search(r"xi\d+", result_type):
            env[name] = np.full(shape_of(result_type), int(re.match(r"dense<(-?\d+)>", rest).group(1)))
        elif re.match(r"(-?\d+) : i\d+", rest):
            env[name] = int(re.match(r"(-?\d+)", rest).group(1))
        elif rest.startswith("true"):
            env[name] = True
        elif rest.startswith("false"):
            env[name] = False
        return
    binary = {"arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
              "arith.muli": lambda a, b: a * b, "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
              "arith.xori": lambda a, b: a ^ b, "arith.shrui": lambda a, b: a >> b,
              "arith.divsi": c_div, "arith.remsi": lambda a, b: a - b * c_div(a, b)}
    if op in binary and len(vals) == 2:
        a, b = ints(vals[0]), ints(vals[1])
        if op in ("arith.divsi", "arith.remsi") and isinstance(a, np.ndarray):
            return
        r = binary[op](a, b)
        env[name] = int(r) if not isinstance(r, np.ndarray) else r
    elif op in ("arith.andi", "arith.ori"):
        a, b = vals
        env[name] = (a & b) if op == "arith.andi" else (a | b)
    elif op == "arith.cmpi":
        pred = rest.split(",")[0].strip()
        a, b = ints(vals[0]), ints(vals[1])
        env[name] = {"slt": a < b, "sle": a <= b, "sgt": a > b, "sge": a >= b, "eq": a == b,
                     "ne": a != b}[pred]
    elif op == "arith.select" and not isinstance(vals[0], np.ndarray):
        env[name] = vals[1] if vals[0] else vals[2]
    elif op in ("arith.extui", "arith.extsi", "arith.index_cast"):
        env[name] = int(vals[0])
    elif op == "tile.iota":
        env[name] = np.arange(shape_of(result_type)[0])
    elif op == "tile.splat":
        env[name] = np.full(shape_of(result_type), vals[0])
    elif op == "tile.expand_dims":
        env[name] = np.expand_dims(vals[0], int(re.search(r"along (\d+)", rest).group(1)))
    elif op == "tile.broadcast":
        env[name] = np.broadcast_to(vals[0], shape_of(result_type))


def run_ops(nodes, env):
    for line, _, _ in nodes:
        evaluate(line, env)


def body_mask(nodes, env, path):
    """Follows the branches of a loop body; returns the mask its leaf applies
    (None: the warp skips) and appends each branch's condition to path."""
    for line, then, other in nodes:
        m = re.match(r"%[\w-]+(?::\d+)? = scf\.if (%[\w-]+)", line)
        if m:
            taken = bool(env[m.group(1)])
            path.append(taken)
            if not then or (len(then) == 1 and then[0][0].startswith("scf.yield %arg")):
                if taken:
                    return None  # the pass-through branch
            branch = then if taken else other
            inner = dict(env)
            run_ops(branch, inner)
            return body_mask(branch, inner, path)
    for line, _, _ in nodes:
        m = re.match(r"(%[\w-]+) = arith\.select (%[\w-]+), %[\w-]+, (%[\w-]+) : tensor", line)
        if m and env.get(m.group(3)) is NEG_INF:
            return env[m.group(2)]
    return True  # no mask: every element counts


def analyse(text, args, pid, num_warps, rows_per_warp):
    """For one program: per loop [(j, warp, mask or None)], the loops' ranges."""
    tree = parse_regions(text)
    env = dict(args)
    env["%pid"] = pid
    out, ranges = [], []
    for line, body, _ in tree:
        if "tile.program_id 0" in line:
            env[line.split()[0]] = pid
            continue
        if re.search(r"= arith\.constant dense<" + NEG_INF + ">", line):
            env[line.split()[0]] = NEG_INF
            continue
        m = re.match(r"%[\w-]+(?::\d+)? = scf\.for (%arg\d+) = (%[\w-]+) to (%[\w-]+)", line)
        if not m:
            evaluate(line, env)
            continue
        iv, lb, ub = m.group(1), env[m.group(2)], env[m.group(3)]
        ranges.append((lb, ub))
        for j in range(lb, ub):
            for w in range(num_warps):
                inner = dict(env)
                for wline, _, _ in tree:
                    if "tile.warp_id" in wline:
                        inner[wline.split()[0]] = w
                # re-evaluate what depends on the warp (the pass's offsets before each loop)
                for before, _, _ in tree:
                    if before == line:
                        break
                    if not before.startswith("%") or "scf.for" in before:
                        continue
                    evaluate(before, inner)
                inner[iv] = j
                run_ops(body, inner)
                mask = body_mask(body, inner, [])
                if mask is not None and mask is not True:
                    mask = np.asarray(mask)[w * rows_per_warp:(w + 1) * rows_per_warp]
                out.append((j, w, mask))
    return out, ranges


def visible(sq, sk, left, right, rows, cols):
    i = np.asarray(rows)[:, None]
    j = np.asarray(cols)[None, :]
    return (j >= i + sk - sq - left) & (j <= i + sk - sq + right) & (i < sq) & (j < sk)


# -- the cases --------------------------------------------------------------------

CASES = [
    # (seqlen_q, seqlen_k, window_left, window_right, causal)
    (1024, 1024, 256, 0, True),     # the benchmark's shape, scaled: 4 row blocks of 128 (and 64-key blocks)
    (640, 640, 128, 0, True),
    (512, 512, 20, 0, True),        # narrower than a warp's 32 rows
    (512, 512, 8, 0, True),         # narrower than a block: no unmasked block
    (512, 512, 100, 0, True),       # not a multiple of 16
    (300, 700, 77, 0, True),        # seqlen_q < seqlen_k (bottom right), ragged ends
    (700, 300, 77, 0, True),        # seqlen_q > seqlen_k: leading rows see nothing
    (512, 512, 64, 64, False),      # (w, w) non-causal
    (512, 512, 19, 45, False),      # narrow, unequal sides
    (333, 520, 30, 200, False),
    (520, 333, 200, 30, False),
]


@needs_compiler
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("block_m,block_n,num_warps", [(128, 64, 4), (64, 64, 4), (128, 32, 4)])
@pytest.mark.parametrize("sq,sk,left,right,causal", CASES)
def test_warp_branches_match_the_mask(sq, sk, left, right, causal, block_m, block_n, num_warps, full):
    check_kernel(sq, sk, left, right, causal, block_m, block_n, num_warps, full)


@needs_compiler
@pytest.mark.parametrize("sq,sk,left,right,causal", [CASES[2], CASES[5], CASES[8]])
def test_warp_branches_with_softcap_and_alibi(sq, sk, left, right, causal):
    """The same with the scores' other switches (their ops move under the branch too)."""
    check_kernel(sq, sk, left, right, causal, 128, 64, 4, False, SOFTCAP=True, ALIBI=True)


def check_kernel(sq, sk, left, right, causal, block_m, block_n, num_warps, full, **switches):
    causal_k, window_k, left_k, right_k = fa._mask_mode(causal, left, right, sq, sk, None)
    cfg = FlashConfig(block_m, block_n, num_warps, 2, False)
    kernel = fa.flash_fwd_kernel().specialize(
        DTYPE=tl.bfloat16, HEAD_DIM=64, CAUSAL=causal_k, WINDOW=window_k,
        **{"SOFTCAP": False, "ALIBI": False, **switches}, VARLEN=False, **cfg.constexprs())
    text = compiler.run_pipeline(kernel.ir, PIPELINE.format(w=num_warps, s=2, full=str(full).lower()))
    assert "tile.warp_id" in text, "tile-skip-warp-blocks left the kernel as it was"
    names = re.search(r"tile\.arg_names = \[([^\]]*)\]", text).group(1)
    index = {n.strip().strip('"'): i for i, n in enumerate(names.split(","))}
    args = {f"%arg{index[k]}": v for k, v in
            dict(seqlen_q=sq, seqlen_k=sk, window_left=left_k, window_right=right_k, num_heads=1,
                 batch=1, kv_group=1).items()}
    rows_per_warp = block_m // num_warps
    nb = -(-sk // block_n)
    # Causal ALiBi runs its key blocks from the last down (flash_fwd's REVERSED).
    block_of = (lambda j: nb - 1 - j) if causal_k and switches.get("ALIBI") else (lambda j: j)
    skipped = taken = 0
    for pid in range(-(-sq // block_m)):
        found, ranges = analyse(text, args, pid, num_warps, rows_per_warp)
        # Blocks the loops run, in order and adjacent, cover every visible key.
        ran = set()
        for lb, ub in ranges:
            ran |= {block_of(j) for j in range(lb, ub)}
        rows = np.arange(pid * block_m, (pid + 1) * block_m)
        for jb in range(nb):
            cols = np.arange(jb * block_n, (jb + 1) * block_n)
            if visible(sq, sk, left_k if window_k else sk, right_k, rows, cols).any():
                assert jb in ran, f"pid {pid}: block {jb} has visible keys but no loop runs it"
        for j, w, mask in found:
            wrows = np.arange(pid * block_m + w * rows_per_warp, pid * block_m + (w + 1) * rows_per_warp)
            cols = np.arange(block_of(j) * block_n, (block_of(j) + 1) * block_n)
            truth = visible(sq, sk, left_k if window_k else sk, right_k, wrows, cols)
            real = (wrows < sq)[:, None] & (cols < sk)[None, :]
            if mask is None:
                skipped += 1
                assert not truth.any(), f"pid {pid} warp {w} skips block {j}, which it sees"
                continue
            taken += 1
            got = np.ones_like(truth) if mask is True else np.asarray(mask)
            assert (got[real] == truth[real]).all(), \
                f"pid {pid} warp {w} block {j}: the body's mask differs from the window's"
    assert taken > 0
    if (sq, sk, left, right, block_m) == (1024, 1024, 256, 0, 128) and block_n == 64:
        # Row blocks 2 and 3 span 6 blocks of 64 keys; in the first and the last, 2 of 4 warps
        # see nothing (row blocks 0-1 start at key 0: their first block is not cut).
        assert skipped >= 2 * 2 * 2, skipped


def test_windows_take_warp_blocks():
    """flash_attn_func's causal windows compile with warp-blocks=true, windows
    without causal too above head_dim 64 (measured slower at d64); dense and
    causal kernels without; a config that sets warp-blocks itself
    (the tuner's warp-blocks=false) keeps it; the kernel's strategy carries it."""
    from tilec import strategy

    def opts(causal, window, d=128):
        return strategy.flash_fwd_config("sm_80", "bfloat16", d, causal, window).lowering_options.split()
    assert opts(True, True) == ["warp-blocks=true"] and opts(False, True) == ["warp-blocks=true"]
    assert opts(True, True, 64) == ["warp-blocks=true"] and opts(False, True, 64) == []
    assert opts(False, True, 96) == ["warp-blocks=true"] and opts(False, True, 32) == []
    assert opts(True, False) == [] and opts(False, False) == []
    off = FlashConfig(128, 64, 4, 2, False, lowering_options="warp-blocks=false")
    assert strategy.with_mask_options(off, True, True, 128) == off
    cfg = strategy.flash_fwd_config("sm_80", "bfloat16", 128, True, True)
    kernel = fa.flash_fwd_kernel().specialize(DTYPE=tl.bfloat16, HEAD_DIM=128, CAUSAL=True, WINDOW=True,
                                              **cfg.constexprs())
    assert kernel.strategy.lowering_options == "warp-blocks=true"
    assert "warp-blocks=true" in kernel.build_options()
    kernel, config = fa._select("bfloat16", 128, True, True, False, False)
    assert kernel.strategy == config.strategy and "warp-blocks=true" in config.lowering_options
