"""tilec.flex_attention on the CPU runner: score_mod / mask_mod written in
plain Python, traced into kernels/flex_fwd.py, against a float64 numpy
reference that evaluates the *same* Python functions eagerly on numpy index
arrays (tl.where/tl.abs/tl.tanh run on numpy outside kernels), so the
reference does not go through the compiler.

Inputs: fresh random f16 (B, H, S, D), odd sequence lengths (1, 17, 100, 257,
not block multiples), seqlen_q < and > seqlen_k. Bounds: ||o - ref|| / ||ref||
<= 1e-3 (f16 output; measured 2.2e-4 .. 2.9e-4), max |lse - ref| <= 2e-5 over
rows that see a key (f32; measured <= 1e-6); rows that see no key must give
o == 0 exactly and lse == -inf (FlexAttention's rule).

Each mask also states what tile-split-masked-loops must make of it ("split":
blocks classified at compile time; "dense": every block that runs masked), so
a regression of the analysis fails here even though the numbers would stay
right.
"""

from pathlib import Path
import numpy as np
import pytest

import _tilec  # noqa: F401  (hard import: the CPU runner must exist)

import tilec
from tilec import flex
from tilec import language as tl
from tilec.errors import CompilationError

O_TOL = 1e-3
LSE_TOL = 2e-5


# -- the mods, plain Python ----------------------------------------------------

WINDOW = 40
PREFIX = 30
CHUNK = 48


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def bottom_right(offset):
    """flash_attn's causal alignment for seqlen_q != seqlen_k (offset sk - sq)."""
    def causal_br(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx
    return causal_br


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= WINDOW)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX) | (q_idx >= kv_idx)


def chunked(b, h, q_idx, kv_idx):
    return q_idx // CHUNK == kv_idx // CHUNK


def first_rows(b, h, q_idx, kv_idx):  # independent of the key: a per-program constant
    return q_idx < 70


def squares(b, h, q_idx, kv_idx):  # not affine: masked everywhere, still right
    return q_idx * q_idx >= kv_idx * 3


def alibi(score, b, h, q_idx, kv_idx):
    return score - (h + 1) * 0.125 * tl.abs(q_idx - kv_idx)


SOFTCAP = 2.0


def softcap(score, b, h, q_idx, kv_idx):
    return SOFTCAP * tl.tanh(score / SOFTCAP)


def relative_bias(score, b, h, q_idx, kv_idx):
    return score + 0.05 * (q_idx - kv_idx)


def documents(lengths, total):
    """A document mask over packed documents: ids captured as a tensor."""
    ids = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)[:total]
    ids = np.concatenate([ids, np.full(total - len(ids), len(lengths), np.int32)])

    def document(b, h, q_idx, kv_idx):
        return ids[q_idx] == ids[kv_idx]

    def document_causal(b, h, q_idx, kv_idx):
        return (ids[q_idx] == ids[kv_idx]) & (q_idx >= kv_idx)

    return document, document_causal


# -- reference -------------------------------------------------------------------

def reference(q, k, v, scale, score_mod=None, mask_mod=None):
    """float64 FlexAttention: q (B, H, Sq, D), k/v (B, Hkv, Sk, D)."""
    B, H, SQ, _ = q.shape
    HK, SK = k.shape[1], k.shape[2]
    o = np.zeros(q.shape)
    lse = np.zeros((B, H, SQ))
    qi, ki = np.arange(SQ)[:, None], np.arange(SK)[None, :]
    for b in range(B):
        for h in range(H):
            hk = h // (H // HK)
            s = q[b, h].astype(np.float64) @ k[b, hk].astype(np.float64).T * scale
            if score_mod is not None:
                s = np.broadcast_to(score_mod(s, b, h, qi, ki), s.shape)
            if mask_mod is not None:
                s = np.where(np.broadcast_to(mask_mod(b, h, qi, ki), s.shape), s, -np.inf)
            m = s.max(1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0)
            p = np.exp(s - m)
            l = p.sum(1, keepdims=True)
            o[b, h] = (p @ v[b, hk].astype(np.float64)) / np.where(l > 0, l, 1)
            with np.errstate(divide="ignore"):
                lse[b, h] = (np.log(l) + m)[:, 0]
    return o, lse


def inputs(rng, B, H, HK, SQ, SK, D):
    q = rng.standard_normal((B, H, SQ, D)).astype(np.float16)
    k = rng.standard_normal((B, HK, SK, D)).astype(np.float16)
    v = rng.standard_normal((B, HK, SK, D)).astype(np.float16)
    return q, k, v


def check(o, lse, q, k, v, scale, score_mod, mask_mod):
    ro, rl = reference(q, k, v, scale, score_mod, mask_mod)
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    empty = np.isneginf(rl)
    assert (o[empty] == 0).all(), "rows that see no key must give 0"
    assert np.isneginf(lse[empty]).all(), "rows that see no key must give lse -inf"
    assert np.isfinite(lse[~empty]).all()
    norm = np.linalg.norm(ro)
    if norm > 0:
        assert np.linalg.norm(o - ro) / norm <= O_TOL
    if (~empty).any():
        assert np.abs(lse[~empty] - rl[~empty]).max() <= LSE_TOL


SHAPES = [(1, 17), (100, 257), (257, 100)]

MASKS = [  # (name, mask_mod factory (sq, sk) -> fn, expected tile.mask)
    ("causal", lambda sq, sk: causal, "split"),
    ("bottom_right", lambda sq, sk: bottom_right(sk - sq), "split"),
    ("sliding_window", lambda sq, sk: sliding_window, "split"),
    ("prefix_lm", lambda sq, sk: prefix_lm, "split"),
    ("chunked", lambda sq, sk: chunked, "split"),
    ("first_rows", lambda sq, sk: first_rows, "split"),
    ("document", lambda sq, sk: documents([37, 90, 5, 64, 61], max(sq, sk))[0], "dense"),
    ("document_causal", lambda sq, sk: documents([37, 90, 5, 64, 61], max(sq, sk))[1], "dense"),
    ("squares", lambda sq, sk: squares, "dense"),
]


@pytest.mark.parametrize("sq,sk", SHAPES)
@pytest.mark.parametrize("name,make,kind", MASKS, ids=[m[0] for m in MASKS])
def test_mask_mod(name, make, kind, sq, sk):
    rng = np.random.default_rng(abs(hash((name, sq, sk))) % 2**32)
    q, k, v = inputs(rng, 2, 2, 2, sq, sk, 64)
    mask_mod = make(sq, sk)
    o, lse = tilec.flex_attention(q, k, v, mask_mod=mask_mod, return_lse=True)
    check(o, lse, q, k, v, 1 / 8, None, mask_mod)
    assert flex.mask_analysis(64, mask_mod=mask_mod)["mask"] == kind


SCORES = [("alibi", alibi), ("softcap", softcap), ("relative_bias", relative_bias)]


@pytest.mark.parametrize("sq,sk", SHAPES)
@pytest.mark.parametrize("name,score_mod", SCORES, ids=[s[0] for s in SCORES])
@pytest.mark.parametrize("with_mask", [False, True], ids=["dense", "causal"])
def test_score_mod(name, score_mod, with_mask, sq, sk):
    rng = np.random.default_rng(abs(hash((name, with_mask, sq, sk))) % 2**32)
    q, k, v = inputs(rng, 1, 3, 3, sq, sk, 64)
    mask_mod = bottom_right(sk - sq) if with_mask else None
    o, lse = tilec.flex_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True,
                                  scale=0.1)
    check(o, lse, q, k, v, 0.1, score_mod, mask_mod)


def test_gqa_head_dim_128_and_default_scale():
    rng = np.random.default_rng(1)
    q, k, v = inputs(rng, 1, 4, 2, 130, 200, 128)
    o, lse = tilec.flex_attention(q, k, v, score_mod=alibi, mask_mod=sliding_window,
                                  enable_gqa=True, return_lse=True)
    check(o, lse, q, k, v, 128 ** -0.5, alibi, sliding_window)


def test_negative_scale_reaches_score_mod_scaled():
    rng = np.random.default_rng(2)
    q, k, v = inputs(rng, 1, 1, 1, 65, 90, 64)
    o, lse = tilec.flex_attention(q, k, v, score_mod=relative_bias, mask_mod=causal,
                                  scale=-0.2, return_lse=True)
    check(o, lse, q, k, v, -0.2, relative_bias, causal)


def test_lambda_helpers_closures_and_torch_functions():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    q, k, v = inputs(rng, 1, 2, 2, 77, 140, 64)
    cap = 3.0

    def capped(x):  # a helper the mod calls, with a closure over a float
        return cap * torch.tanh(x / cap)

    def mod(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, capped(score), capped(score) - 1.0)

    o = tilec.flex_attention(q, k, v, score_mod=mod, mask_mod=lambda b, h, qi, ki: qi + 10 >= ki)
    # The reference evaluates the same functions on numpy (torch.where/tanh on
    # torch tensors of the numpy values).
    def mod_np(score, b, h, qi, ki):
        t = lambda a: torch.as_tensor(a)  # noqa: E731
        return mod(t(score), b, h, t(qi), t(ki)).numpy()
    ro, _ = reference(q, k, v, 1 / 8, mod_np, lambda b, h, qi, ki: qi + 10 >= ki)
    assert np.linalg.norm(o - ro) / np.linalg.norm(ro) <= O_TOL


def test_torch_cpu_tensors_bf16_and_block_mask():
    torch = pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask

    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 96, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    bm = create_block_mask(causal, 1, 2, 96, 96, device="cpu")
    o, lse = tilec.flex_attention(q, k, v, block_mask=bm, return_lse=True)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and lse.shape == (1, 2, 96)
    ro, rl = reference(q.float().numpy(), k.float().numpy(), v.float().numpy(), 1 / 8, None, causal)
    assert np.linalg.norm(o.float().numpy() - ro) / np.linalg.norm(ro) <= 8e-3  # bf16: 8 bits
    assert np.abs(lse.numpy() - rl).max() <= 1e-4


def test_document_ids_change_without_recompiling():
    """A new tensor of ids for the same mod code reuses the kernel (ids are
    launch arguments) and gives the new documents' answer."""
    rng = np.random.default_rng(5)
    q, k, v = inputs(rng, 1, 1, 1, 150, 150, 64)
    first, _ = documents([50, 100], 150)
    second, _ = documents([120, 30], 150)
    assert flex.specialize(64, mask_mod=first) is flex.specialize(64, mask_mod=second)
    for mod in (first, second):
        check(*tilec.flex_attention(q, k, v, mask_mod=mod, return_lse=True), q, k, v, 1 / 8, None, mod)


def test_cache_key_tells_functions_apart():
    """Two mods, or one whose captured constant differs, never share a kernel;
    the same function does."""
    k1 = flex.specialize(64, mask_mod=bottom_right(3))
    assert flex.specialize(64, mask_mod=bottom_right(3)) is k1  # same code, same constant
    assert flex.specialize(64, mask_mod=bottom_right(4)) is not k1
    assert flex.specialize(64, score_mod=alibi) is not flex.specialize(64, score_mod=relative_bias)
    assert flex.specialize(64, score_mod=alibi).name != flex.specialize(64, score_mod=relative_bias).name


def bad_score_mod(score, b, h, q_idx, kv_idx):
    return score + len(q_idx)  # len() of a tile: not a compile-time value


def test_error_points_at_the_users_line():
    with pytest.raises(CompilationError) as info:
        flex.specialize(64, score_mod=bad_score_mod)
    e = info.value
    assert e.filename == __file__
    assert e.lineno == bad_score_mod.__code__.co_firstlineno + 1
    assert "called from here" in str(e) and "flex_fwd.py" in str(e)


def test_dense_mask_warns_once():
    rng = np.random.default_rng(9)
    q, k, v = inputs(rng, 1, 1, 1, 40, 40, 64)

    def squares2(b, h, q_idx, kv_idx):
        return q_idx * q_idx >= kv_idx

    with pytest.warns(flex.MaskWarning, match="arith.muli"):
        tilec.flex_attention(q, k, v, mask_mod=squares2)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tilec.flex_attention(q, k, v, mask_mod=squares2)  # once per kernel
        tilec.flex_attention(q, k, v, mask_mod=causal)    # split: no warning


def test_mask_analysis_reports_what_it_could_not_classify():
    report = flex.mask_analysis(64, mask_mod=squares)
    assert report["mask"] == "dense"
    assert "arith.muli" in report["note"] and __file__ in report["note"]
    assert flex.mask_analysis(64)["mask"] == "split"  # only the key-bound mask


def test_manifest_mask_field():
    pytest.importorskip("tilec.compiler")
    from tilec import compiler
    if not compiler.available():
        pytest.skip("no compiler extension")
    art = flex.specialize(64, mask_mod=squares).compile("sm_80")
    assert art.manifest["mask"] == "dense" and "arith.muli" in art.manifest["mask_note"]
    assert flex.specialize(64, mask_mod=prefix_lm).compile("sm_80").manifest["mask"] == "split"


def test_bad_inputs():
    q = np.zeros((1, 4, 16, 64), np.float16)
    kv = np.zeros((1, 2, 16, 64), np.float16)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        tilec.flex_attention(q, kv, kv)
    with pytest.raises(TypeError, match="score_mod must be a function"):
        tilec.flex_attention(q, q, q, score_mod=3)
    with pytest.raises(ValueError, match="not two different masks"):
        tilec.flex_attention(q, q, q, mask_mod=causal, block_mask=type("BM", (), {"mask_mod": prefix_lm})())


def test_flash_fwd_takes_the_same_hooks():
    """kernels/flash_fwd.py's SCORE_MOD / MASK_MOD constexprs (flash_attn's
    (b, s, h, d) layout; rows that see no key: out 0, lse +inf there)."""
    from tilec import strategy
    from tilec.flash_attn import flash_fwd_kernel

    rng = np.random.default_rng(6)
    B, H, SQ, SK, D = 1, 2, 90, 150, 64
    q, k, v = inputs(rng, B, H, H, SQ, SK, D)
    qs, ks, vs = (np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (q, k, v))
    config = strategy.flash_fwd_config(head_dim=D, causal=True)
    kernel = flash_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=D, SCORE_MOD=relative_bias,
                                           MASK_MOD=first_rows, **config.constexprs())
    o = np.full(qs.shape, np.nan, np.float16)
    lse = np.full((B, H, SQ), np.nan, np.float32)
    st = [tuple(x // t.itemsize for x in t.strides) for t in (qs, ks, vs, o, lse)]
    kernel.run_cpu(qs, ks, vs, o, lse, SQ, SK, H, B, 1, *st[0][:3], *st[1][:3], *st[2][:3], *st[3][:3],
                   st[4][0], st[4][1], 0.125, 0, 0, 1.0, np.zeros(1, np.float32), 0,
                   *([np.zeros(2, np.int32)] * 3), 0,  # varlen's cu_seqlens_q/k, seqused_k (unused)
                   grid=(-(-SQ // config.block_m), H, B))
    ro, rl = reference(q, k, v, 0.125, relative_bias, first_rows)
    o = o.transpose(0, 2, 1, 3)
    empty = np.isneginf(rl)
    assert (o[empty] == 0).all() and np.isposinf(lse[empty]).all()
    assert np.linalg.norm(o - ro) / np.linalg.norm(ro) <= O_TOL
    assert np.abs(lse[~empty] - rl[~empty]).max() <= LSE_TOL


@pytest.mark.parametrize("scale", [0.07, 0.125, 1.0])
def test_window_rows_without_keys_are_not_nan(scale):
    """Regression: with the running max clamped at -1e30, tile-minimize-
    nonmatmul's alpha = exp2(fma(m, K, -m'K)) had a rounding residual of
    about 2^76 in rows that saw no key yet, exp2 overflowed and l = 0 * inf
    gave NaN rows (flash_attn_func with a window and seqlen_q > seqlen_k, at
    these scales). flex_fwd clamps at -2^20, flash_fwd at -1e8."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((1, 257, 1, 64)).astype(np.float16)
    k = rng.standard_normal((1, 100, 1, 64)).astype(np.float16)
    o, lse, _ = tilec.flash_attn_func(q, k, k, softmax_scale=scale, window_size=(10, 0),
                                      return_attn_probs=True)
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    assert (o[:, :157] == 0).all() and np.isposinf(lse[..., :157]).all()
    qf, kf = (np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (q, k))
    of, lf = tilec.flex_attention(qf, kf, kf, scale=scale, mask_mod=bottom_right(100 - 257),
                                  return_lse=True)
    check(of, lf, qf, kf, kf, scale, None, bottom_right(100 - 257))


@pytest.mark.parametrize("mask_name", ["window", "bottom_right"])
def test_lazy_rescale_with_the_clamped_max(mask_name):
    """The GPU lowering's tile-lazy-rescale keeps a row's max lazily also
    when it is clamped from below (flex_fwd's empty-row rule); run the
    rewritten IR on the CPU with scores that climb block by block (both the
    kept and the grown paths) and rows that see no key in early blocks."""
    from tilec import compiler

    sq, sk, d = 300, 260, 128
    mask_mod = sliding_window if mask_name == "window" else bottom_right(sk - sq)
    kernel = flex.flex_fwd_kernel().specialize(DTYPE=tl.float16, HEAD_DIM=d, MASK_MOD=mask_mod,
                                               BLOCK_M=64, BLOCK_N=64, NUM_WARPS=2)
    text = compiler.run_pipeline(kernel.ir, "builtin.module(tile-optimize,tile-lazy-rescale"
                                            "{num-warps=2 min-registers=128})")
    assert "tile.skip_unit_rescale" in text, "the clamped running max was not rewritten"
    rng = np.random.default_rng(8)
    scale = d ** -0.5
    q, k, v = inputs(rng, 1, 2, 2, sq, sk, d)
    q, k = 0.25 * q, 0.25 * k
    block = np.arange(sk) // 64
    q[..., 0] = 4.0
    k[..., 0] = ((block * 1.8 + (block // 4) * 12.0) / (4.0 * scale))[None, None, :]
    o = np.full(q.shape, np.nan, np.float16)
    lse = np.full((1, 2, sq), np.nan, np.float32)
    st = [tuple(x // t.itemsize for x in t.strides) for t in (q, k, v, o, lse)]
    args = (q, k, v, o, lse, sq, sk, 2, 1, 1, *st[0][:3], *st[1][:3], *st[2][:3], *st[3][:3],
            st[4][0], st[4][1], scale)
    compiler.run_cpu(text, "<lazy flex>", kernel.name, args, [t for _, t in kernel.params],
                     (-(-sq // 64), 2, 1), run_tile_passes=False)
    ro, rl = reference(q, k, v, scale, None, mask_mod)
    empty = np.isneginf(rl)
    assert not np.isnan(o).any() and (o[empty] == 0).all() and np.isneginf(lse[empty]).all()
    assert np.linalg.norm(o - ro) / np.linalg.norm(ro) <= O_TOL
    assert np.abs(lse[~empty] - rl[~empty]).max() <= LSE_TOL * max(1.0, np.abs(rl[~empty]).max())


TABLE_2D = np.zeros((4, 4), np.int32)


def uses_a_2d_table(b, h, q_idx, kv_idx):
    return TABLE_2D[q_idx] == 0


def test_indexing_a_2d_tensor_is_a_clear_error():
    with pytest.raises(CompilationError, match=r"must be 1-D .* got shape \(4, 4\)") as info:
        flex.specialize(64, mask_mod=uses_a_2d_table)
    assert info.value.filename == __file__


def test_mask_analysis_without_the_extension_reads_the_manifest(monkeypatch):
    """A GPU host has only the tilec CLI: mask_analysis() compiles through it and
    reads the manifest's verdict, the same as the in-process pass gives."""
    import tilec.compiler as compiler

    cli = Path(__file__).resolve().parents[2] / "build" / "bin" / "tilec"
    if not cli.exists():
        pytest.skip("build/bin/tilec is not built")
    mods = [lambda b, h, q, k: q >= k, lambda b, h, q, k: (q * 0 + 7) > (k % 3)]
    native = [tilec.flex.mask_analysis(64, None, m) for m in mods]
    for m in mods:  # forget the cached verdicts, so the CLI path computes its own
        flex.specialize(64, "float16", None, m)._mask = None
    monkeypatch.setenv("TILEC_COMPILER", "cli")
    monkeypatch.setenv("TILEC_CLI", str(cli))
    compiler.reset_compiler_kind()
    try:
        viacli = [tilec.flex.mask_analysis(64, None, m) for m in mods]
    finally:
        monkeypatch.undo()
        compiler.reset_compiler_kind()
    assert [r["mask"] for r in viacli] == ["split", "dense"]
    assert viacli == native
