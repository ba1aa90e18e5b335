#!/usr/bin/env python3
"""Correctness of tilec's flash-attention forward kernels.

For every <artifacts>/flash_fwd*.json manifest, launches the kernel through
tilec.runtime on fresh random inputs and compares the output O and the
log-sum-exp LSE with a float64 reference, softmax(q kᵀ · scale) v.

Bounds: ‖O − ref‖/‖ref‖ < 2e-3 (f16) or 1e-2 (bf16); per row
|LSE − ref| < 1e-3 · max(1, |ref|). Causal masks are top-left aligned (row i
sees columns j <= i) and tested with seqlen_q == seqlen_k.

Beyond the numbers, most cases place every tensor inside a larger buffer
(guard rows past the sequence end and a guard head): input guards hold NaN,
so a kernel that lets out-of-bounds K/V rows reach the result fails; output
guards hold a sentinel that must survive, so stray writes fail. O and LSE
are poisoned with NaN before each launch, so unwritten elements fail.

    python3 bench/check_flash.py --artifacts build/artifacts [--quick]
    python3 bench/check_flash.py --artifacts build/artifacts --sanitize memcheck
    python3 bench/check_flash.py --variants [--quick]   # flash_attn's variants

--variants runs bench/flash_variants.py's matrix (GQA/MQA, bottom-right
causal with seqlen_q != seqlen_k, windows, softcap, ALiBi, varlen, head dims
59..256) through tilec's flash_attn API (python/tilec, with the prebuilt
kernels of <artifacts>/variants) against a float64 reference written from
flash_attn's semantics; every output tilec allocates is poisoned with NaN.

Exit status: 0 when every case passes, 1 otherwise, 2 on usage errors.
bench_flash.py imports the helpers here.
"""

import argparse
import importlib.util
import itertools
import math
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]

# What the compiler promises for flash_fwd kernels (see the manifest contract).
STRIDE_NAMES = [
    f"stride_{t}{d}" for t in "qkvo" for d in ("b", "s", "h")
] + ["stride_lseb", "stride_lseh"]
SCALAR_NAMES = ["seqlen_q", "seqlen_k", "num_heads", "batch", "kv_group"]
# The variants' parameters (kernels/flash_fwd.py), after the scale.
VARIANT_PARAMS = [("window_left", "i32", None), ("window_right", "i32", None),
                  ("softcap", "f32", None), ("alibi", "ptr", "f32"), ("stride_alibi_b", "i64", None),
                  ("cu_seqlens_q", "ptr", "i32"), ("cu_seqlens_k", "ptr", "i32"),
                  ("seqused_k", "ptr", "i32"), ("use_seqused_k", "i32", None)]

BOUND = {"f16": 2e-3, "bf16": 1e-2}
LSE_BOUND = 1e-3
GUARD_ROWS = 64  # rows past the sequence end in padded layouts
OUT_SENTINEL = -1024.0  # exact in f16, bf16 and f32

# (batch, heads, seqlen_q, seqlen_k, layout, amplitude of q). Amplitude 8
# spreads the scores (std 8) so the online softmax rescales often and exp
# would overflow without the max subtraction. "climb": scores that rise by
# 1.8 per 64 keys and jump by 12 every 256, so that lazy rescale (a row's
# max kept until the new one is 2^8 larger) both keeps stale maxima, with
# scores up to ~2^7.8, and takes new ones; warps then skip O's rescale in
# some iterations and not in others.
CASES = [
    (1, 1, 1, 1, "padded", 1),
    (2, 3, 17, 17, "padded", 1),
    (1, 2, 1000, 1000, "padded", 1),
    (1, 4, 4096, 4096, "contiguous", 1),
    (2, 2, 257, 257, "padded", 1),
    (1, 2, 1000, 1000, "contiguous", 8),
    (1, 2, 1000, 1000, "padded", "climb"),
]
NONCAUSAL_CASES = [
    (2, 3, 17, 1000, "padded", 1),
    (1, 2, 1000, 17, "padded", 1),
    (1, 1, 1, 4096, "padded", 1),
]
QUICK_CASES = [(2, 3, 17, 17, "padded", 1), (2, 2, 257, 257, "padded", 1)]
QUICK_NONCAUSAL_CASES = [(2, 3, 17, 1000, "padded", 1)]


def load_runtime():
    """python/tilec/runtime.py, loaded by path: the GPU host builds only
    lib/runtime, so the tilec package itself may not import there."""
    spec = importlib.util.spec_from_file_location(
        "tilec_runtime", REPO / "python" / "tilec" / "runtime.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def find_flash_manifests(artifacts, name_filter=None):
    """Sorted flash_fwd*.json paths; exits with status 2 when there are none."""
    folder = Path(artifacts)
    if not folder.is_dir():
        sys.exit(f"error: artifacts folder {folder} does not exist (compile the kernels first)")
    paths = sorted(folder.glob("flash_fwd*.json"))
    if name_filter:
        paths = [p for p in paths if name_filter in p.stem]
    if not paths:
        sys.exit(f"error: no flash_fwd*.json manifests in {folder}"
                 + (f" matching '{name_filter}'" if name_filter else ""))
    return paths


class FlashKernel:
    """A flash_fwd kernel with its variant, called on (b, s, h, d) tensors."""

    def __init__(self, runtime, path):
        self.kernel = runtime.Kernel(path)
        self.name = self.kernel.name
        manifest = self.kernel.manifest
        variant = manifest.get("variant")
        if not isinstance(variant, dict):
            raise ValueError(f"{path}: manifest has no \"variant\" object")
        missing = {"dtype", "head_dim", "causal"} - variant.keys()
        if missing:
            raise ValueError(f"{path}: variant lacks {sorted(missing)}")
        self.dtype_name = variant["dtype"]
        if self.dtype_name not in BOUND:
            raise ValueError(f"{path}: variant dtype {self.dtype_name!r} is not f16 or bf16")
        self.dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[self.dtype_name]
        self.head_dim = int(variant["head_dim"])
        self.causal = bool(variant["causal"])
        self._dummy = None

        expected = (
            [(n, "ptr", self.dtype_name) for n in "qkvo"]
            + [("lse", "ptr", "f32")]
            + [(n, "i32", None) for n in SCALAR_NAMES]
            + [(n, "i64", None) for n in STRIDE_NAMES]
            + [("scale", "f32", None)]
            + VARIANT_PARAMS
        )
        actual = [(p["name"], p["kind"], p.get("elem")) for p in manifest["params"]]
        if actual != expected:
            raise ValueError(
                f"{path}: params differ from the flash_fwd contract\n"
                f"  expected {expected}\n  got      {actual}"
            )

    def __call__(self, q, k, v, o, lse, scale, stream=None):
        batch, seqlen_q, heads, head_dim = q.shape
        seqlen_k = k.shape[1]
        if head_dim != self.head_dim:
            raise ValueError(f"{self.name} takes head_dim {self.head_dim}, got {head_dim}")
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse)):
            if t.stride(-1) != 1:
                raise ValueError(f"{name}: the last dimension must be contiguous")
        if self._dummy is None:
            self._dummy = torch.zeros(4, dtype=torch.float32, device=q.device)
            self._dummy_i32 = torch.zeros(4, dtype=torch.int32, device=q.device)
        self.kernel(
            q, k, v, o, lse,
            seqlen_q, seqlen_k, heads, batch, heads // k.shape[2],
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
            *lse.stride()[:2],
            scale, -1, -1, 1.0, self._dummy, 0, self._dummy_i32, self._dummy_i32, self._dummy_i32, 0,
            stream=stream,
        )

    def label(self):
        return (f"{self.dtype_name} d{self.head_dim}"
                f"{' causal' if self.causal else ''}")


def reference(q, k, v, scale, causal):
    """float64 (O, LSE) for (b, s, h, d) inputs; LSE is (b, h, seqlen_q)."""
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    scores = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    if causal:
        sq, sk = scores.shape[-2:]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(1)
        scores.masked_fill_(mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse[..., None]), vd)
    return out.transpose(1, 2), lse


def make_tensor(shape, dtype, layout, guard_fill, seq_dim, head_dim_index):
    """An empty tensor of `shape`; in the padded layout, a view into a buffer
    with GUARD_ROWS extra rows along `seq_dim` and one extra head along
    `head_dim_index`, filled with `guard_fill`. Returns (view, buffer)."""
    if layout == "contiguous":
        t = torch.empty(shape, dtype=dtype, device="cuda")
        return t, t
    padded = list(shape)
    padded[seq_dim] += GUARD_ROWS
    padded[head_dim_index] += 1
    buffer = torch.full(padded, guard_fill, dtype=dtype, device="cuda")
    view = buffer[tuple(slice(0, n) for n in shape)]
    return view, buffer


def guards_intact(view, buffer):
    """Whether everything in `buffer` outside `view` still holds the sentinel."""
    if view is buffer:
        return True
    rest = buffer.clone()
    rest[tuple(slice(0, n) for n in view.shape)] = OUT_SENTINEL
    return bool((rest == OUT_SENTINEL).all())


def run_case(fk, case, seed):
    """Runs one case; returns a dict of measurements."""
    b, h, sq, sk, layout, amp = case
    d = fk.head_dim
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(shape):
        return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)

    nan = float("nan")
    q, _ = make_tensor((b, sq, h, d), fk.dtype, layout, nan, 1, 2)
    k, _ = make_tensor((b, sk, h, d), fk.dtype, layout, nan, 1, 2)
    v, _ = make_tensor((b, sk, h, d), fk.dtype, layout, nan, 1, 2)
    scale = d ** -0.5
    if amp == "climb":
        block = torch.arange(sk, device="cuda") // 64
        climb = block * 1.8 + (block // 4) * 12.0  # each key's score offset (natural log)
        q.copy_(randn(q.shape) * 0.25)
        k.copy_(randn(k.shape) * 0.25)
        q[..., 0] = 4.0
        k[..., 0] = (climb / (4.0 * scale))[None, :, None]
    else:
        q.copy_(randn(q.shape) * amp)
        k.copy_(randn(k.shape))
    v.copy_(randn(v.shape))
    o, o_buf = make_tensor((b, sq, h, d), fk.dtype, layout, OUT_SENTINEL, 1, 2)
    lse, lse_buf = make_tensor((b, h, sq), torch.float32, layout, OUT_SENTINEL, 2, 1)
    o.fill_(nan)
    lse.fill_(nan)

    fk(q, k, v, o, lse, scale)
    torch.cuda.synchronize()

    ref_o, ref_lse = reference(q, k, v, scale, fk.causal)
    rel = ((o.double() - ref_o).norm() / ref_o.norm()).item()
    lse_diff = (lse.double() - ref_lse).abs()
    result = {
        "rel": rel,
        "sdpa_rel": sdpa_error(q, k, v, scale, fk.causal, ref_o),
        "lse_err": lse_diff.max().item(),
        # NaN compares false, so unwritten (NaN) rows fail here too.
        "lse_ok": bool((lse_diff < LSE_BOUND * ref_lse.abs().clamp(min=1)).all()),
        "o_nan": int(torch.isnan(o).sum().item()),
        "guards_ok": guards_intact(o, o_buf) and guards_intact(lse, lse_buf),
    }
    result["ok"] = (rel < BOUND[fk.dtype_name] and result["lse_ok"]
                    and result["guards_ok"] and result["o_nan"] == 0)
    return result


def sdpa_error(q, k, v, scale, causal, ref_o):
    """torch SDPA's relative error on the same inputs, for comparison only;
    NaN when SDPA cannot run them, or under compute-sanitizer (see sanitize)."""
    if os.environ.get("TILEC_NO_SDPA"):
        return float("nan")
    try:
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
            is_causal=causal, scale=scale,
        ).transpose(1, 2)
    except RuntimeError:
        return float("nan")
    return ((out.double() - ref_o).norm() / ref_o.norm()).item()


def worst(a, b):
    """max that keeps NaN (a NaN error is the worst)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def cuda_usable():
    """False once a fault (e.g. an illegal address) has broken the context."""
    try:
        torch.cuda.synchronize()
        return torch.ones(1, device="cuda").sum().item() == 1
    except RuntimeError:
        return False


ROW = "{:<30} {:>2} {:>2} {:>5} {:>5} {:<10} {:>3} {:>9} {:>9} {:>9} {:>6}  {}"


def check(paths, quick):
    """Runs every case of every kernel; returns (all passed, summary lines)."""
    runtime = load_runtime()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"bounds: rel < {BOUND['f16']:g} (f16) / {BOUND['bf16']:g} (bf16); "
          f"|lse err| < {LSE_BOUND:g}·max(1,|lse|)\n")
    print(ROW.format("kernel", "b", "h", "sq", "sk", "layout", "amp",
                     "rel err", "sdpa rel", "lse err", "guards", "result"))
    summary = []
    all_ok = True
    for path in paths:
        try:
            fk = FlashKernel(runtime, path)
        except (ValueError, TypeError) as e:
            print(f"{path.stem}: ERROR {e}")
            summary.append(f"{path.stem:<30} manifest error")
            all_ok = False
            continue
        cases = QUICK_CASES if quick else CASES
        if not fk.causal:
            cases = cases + (QUICK_NONCAUSAL_CASES if quick else NONCAUSAL_CASES)
        passed, worst_rel, worst_lse = 0, 0.0, 0.0
        for case in cases:
            seed = zlib.crc32(f"{fk.name}/{case}".encode())
            b, h, sq, sk, layout, amp = case
            try:
                r = run_case(fk, case, seed)
            except Exception as e:  # report and go on to the next case
                print(ROW.format(fk.name, b, h, sq, sk, layout, amp, "-", "-", "-", "-",
                                 f"ERROR {type(e).__name__}: {e}"))
                all_ok = False
                if not cuda_usable():
                    print("\nThe CUDA context is unusable after this fault; stopping. "
                          "Rerun with --filter to check the other kernels.")
                    summary.append(f"{fk.name:<30} CUDA fault (run stopped)")
                    return False, summary
                continue
            passed += r["ok"]
            worst_rel = worst(worst_rel, r["rel"])
            worst_lse = worst(worst_lse, r["lse_err"])
            notes = []
            if not r["rel"] < BOUND[fk.dtype_name]:
                notes.append("rel err")
            if r["o_nan"]:
                notes.append(f"{r['o_nan']} NaN in O")
            if not r["lse_ok"]:
                notes.append("LSE")
            if not r["guards_ok"]:
                notes.append("wrote outside O/LSE")
            status = "ok" if r["ok"] else "FAIL " + ", ".join(notes)
            print(ROW.format(fk.name, b, h, sq, sk, layout, amp,
                             f"{r['rel']:.2e}", f"{r['sdpa_rel']:.2e}", f"{r['lse_err']:.2e}",
                             "ok" if r["guards_ok"] else "BAD", status))
        all_ok &= passed == len(cases)
        # Machine code for this GPU in the manifest ("sass") must be what ran,
        # not a JIT compile of the PTX.
        image = fk.kernel.loaded_image
        device_arch = "sm_%d%d" % torch.cuda.get_device_capability()
        shipped = {s["arch"] for s in fk.kernel.manifest.get("sass", [])}
        if device_arch in shipped and image != f"cubin {device_arch}":
            all_ok = False
            image += f" (BAD: the manifest ships {device_arch} machine code)"
        summary.append(
            f"{fk.name:<30} {passed:>2}/{len(cases):<2} passed   worst rel {worst_rel:.2e} "
            f"(bound {BOUND[fk.dtype_name]:g})   worst lse {worst_lse:.2e}   {image}"
        )
    return all_ok, summary


# --- flash_attn's variants through the public API ----------------------------


def variant_visible(sq, sk, causal, window, has_alibi, max_sq, max_sk, device):
    """(sq, sk) bool mask of flash_attn 2.x (csrc option handling included)."""
    left, right = window
    left = -1 if left >= max_sk else left
    right = -1 if right >= max_sk else right
    if max_sq == 1 and not has_alibi:
        causal = False
    if causal:
        right = 0
    if left < 0 and right < 0:
        return torch.ones(sq, sk, dtype=torch.bool, device=device)
    i = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    return (j >= i - (max_sk if left < 0 else left)) & (j <= i + (max_sk if right < 0 else right))


def variant_reference(q, k, v, scale, opts, slopes, max_sq=None, max_sk=None):
    """float64 (out (sq, hq, d), lse (hq, sq)) of one sequence (sq, h, d)."""
    sq, hq, _ = q.shape
    sk, hk, _ = k.shape
    rep = hq // hk
    qd = q.double().transpose(0, 1)
    kd = k.double().repeat_interleave(rep, dim=1).transpose(0, 1)
    vd = v.double().repeat_interleave(rep, dim=1).transpose(0, 1)
    s = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    cap = opts.get("softcap", 0.0)
    if cap > 0:
        s = cap * torch.tanh(s / cap)
    if slopes is not None:
        dist = (torch.arange(sq, device=q.device)[:, None] + (sk - sq)
                - torch.arange(sk, device=q.device)[None, :]).abs()
        s = s - slopes.double()[:, None, None] * dist
    vis = variant_visible(sq, sk, opts.get("causal", False), opts.get("window_size", (-1, -1)),
                          slopes is not None, max_sq or sq, max_sk or sk, q.device)
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    empty = torch.isinf(lse)
    p = torch.exp(s - torch.where(empty, 0.0, lse)[..., None])
    out = torch.matmul(p, vd).transpose(0, 1)
    return out, torch.where(empty, float("inf"), lse)


def run_variant_case(fa, tilec, case, dtype, seed, device="cuda"):
    """One case: (b, s, h, d) inputs for "func", packed ones for "varlen";
    device "cpu" runs it on the CPU runner (how this code is tested here)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    hq, hk, d, opts = case["hq"], case["hk"], case["d"], dict(case["opts"])
    alibi = opts.pop("alibi", None)
    if case["api"] == "func":
        batch, lens_q, lens_k = case["b"], [case["sq"]] * case["b"], [case["sk"]] * case["b"]
    else:
        lens_q, lens_k = case["lens_q"], case["lens_k"]
        batch = len(lens_q)
    tq, tk = sum(lens_q), sum(lens_k)
    q = torch.randn(tq, hq, d, generator=gen, device=device).to(dt)
    k = torch.randn(tk, hk, d, generator=gen, device=device).to(dt)
    v = torch.randn(tk, hk, d, generator=gen, device=device).to(dt)
    slopes = None
    if alibi == "h":
        slopes = torch.rand(hq, generator=gen, device=device) * 0.9 + 0.05
    elif alibi == "bh":
        slopes = torch.rand(batch, hq, generator=gen, device=device) * 0.9 + 0.05
    cu_q = torch.tensor([0] + list(itertools.accumulate(lens_q)), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + list(itertools.accumulate(lens_k)), dtype=torch.int32, device=device)
    if case["api"] == "func":
        shape = lambda t, s: t.view(batch, s, *t.shape[1:])
        out, lse, _ = tilec.flash_attn_func(shape(q, case["sq"]), shape(k, case["sk"]),
                                            shape(v, case["sk"]), alibi_slopes=slopes,
                                            return_attn_probs=True, **opts)
        out = out.reshape(tq, hq, d)
        lse = lse.transpose(0, 1).reshape(hq, tq)
    else:
        out, lse, _ = tilec.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                                   alibi_slopes=slopes, return_attn_probs=True,
                                                   **opts)
    if device == "cuda":
        torch.cuda.synchronize()
    ref_o = torch.zeros(tq, hq, d, dtype=torch.float64, device=device)
    ref_lse = torch.full((hq, tq), float("inf"), dtype=torch.float64, device=device)
    for b in range(batch):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if q1 == q0:
            continue
        sl = None if slopes is None else (slopes if slopes.dim() == 1 else slopes[b])
        o_b, l_b = variant_reference(q[q0:q1], k[k0:k1], v[k0:k1], d ** -0.5, opts, sl,
                                     max(lens_q), max(lens_k))
        ref_o[q0:q1], ref_lse[:, q0:q1] = o_b, l_b
    finite = torch.isfinite(ref_lse)
    rel = ((out.double() - ref_o).norm() / ref_o.norm().clamp(min=1e-300)).item()
    lse_d = lse.double()
    lse_err = (lse_d[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    inf_ok = bool((torch.isposinf(lse_d) == ~finite).all())
    empty_ok = bool((out[(~finite).transpose(0, 1)] == 0).all()) if (~finite).any() else True
    nan = int(torch.isnan(out).sum().item())
    ok = (rel < BOUND[{"float16": "f16", "bfloat16": "bf16"}[dtype]] and inf_ok and empty_ok
          and nan == 0 and lse_err < LSE_BOUND * max(1.0, ref_lse[finite].abs().max().item()
                                                     if finite.any() else 1.0))
    return dict(rel=rel, lse_err=lse_err, inf_ok=inf_ok, empty_ok=empty_ok, nan=nan, ok=ok)


def check_variants(artifacts, quick, label_filter=None):
    """Every bench/flash_variants.py case in both dtypes (with label_filter:
    only those whose label, dtype included, contains it); returns (ok, summary)."""
    sys.path[:0] = [str(REPO / "python"), str(REPO / "bench")]
    folders = [str(Path(artifacts) / "variants"), str(Path(artifacts)), str(Path(artifacts) / "extra")]
    os.environ["TILEC_ARTIFACTS"] = os.pathsep.join(folders)
    import flash_variants
    import tilec
    from tilec import flash_attn as fa

    real_empty = fa._empty

    def poisoned(like, shape, dtype):
        t = real_empty(like, shape, dtype)
        t.fill_(float("nan"))
        return t

    fa._empty = poisoned
    cases = [flash_variants.CASES[i] for i in flash_variants.QUICK] if quick else flash_variants.CASES
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    all_ok, summary = True, []
    for case in cases:
        for dtype in flash_variants.DTYPES:
            label = f"{dtype:<8} {flash_variants.case_label(case)}"
            if label_filter and label_filter not in label:
                continue
            seed = zlib.crc32(label.encode())
            try:
                r = run_variant_case(fa, tilec, case, dtype, seed)
            except Exception as e:  # report and go on
                all_ok = False
                print(f"{label}: ERROR {type(e).__name__}: {e}")
                summary.append(f"{label}: ERROR")
                if not cuda_usable():
                    print("\nThe CUDA context is unusable after this fault; stopping.")
                    return False, summary
                continue
            all_ok &= r["ok"]
            notes = [] if r["ok"] else [n for n, bad in (("rel err", not r["rel"] < BOUND["bf16" if dtype == "bfloat16" else "f16"]),
                                                          ("lse +inf rows", not r["inf_ok"]),
                                                          ("empty rows not 0", not r["empty_ok"]),
                                                          (f"{r['nan']} NaN", r["nan"])) if bad]
            line = (f"{label}: rel {r['rel']:.2e} lse {r['lse_err']:.2e} "
                    + ("ok" if r["ok"] else "FAIL " + (", ".join(notes) or "lse")))
            print(line)
            summary.append(line)
    return all_ok, summary


def sanitize(args):
    """Reruns this script (--quick) under compute-sanitizer."""
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.access(exe, os.X_OK):
        print("error: compute-sanitizer not found (PATH, /usr/local/cuda/bin)")
        return 2
    cmd = [exe, "--tool", args.sanitize, "--error-exitcode", "1", "--print-limit", "20",
           sys.executable, str(Path(__file__).resolve()), "--artifacts", args.artifacts, "--quick"]
    if args.variants:
        cmd.append("--variants")
    if args.filter:
        cmd += ["--filter", args.filter]
    # Without caching every tensor is its own allocation, so the sanitizer
    # sees accesses past a tensor's end instead of into a pooled neighbour.
    # TILEC_NO_SDPA: the comparison column's torch SDPA kernels are not
    # checked (cuDNN's report races of their own under racecheck).
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", TILEC_NO_SDPA="1")
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd, env=env)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", default="build/artifacts",
                        help="folder of compiled kernels (default: build/artifacts)")
    parser.add_argument("--quick", action="store_true", help="a few small cases only")
    parser.add_argument("--filter", help="only kernels whose name contains this (with --variants: "
                        "only cases whose label contains it, e.g. 'bfloat16 varlen')")
    parser.add_argument("--sanitize", nargs="?", const="memcheck", metavar="TOOL",
                        help="run --quick under compute-sanitizer TOOL (default memcheck; "
                             "also racecheck, synccheck, initcheck)")
    parser.add_argument("--summary", help="also write a per-kernel summary to this file")
    parser.add_argument("--variants", action="store_true",
                        help="run bench/flash_variants.py's matrix through the flash_attn API "
                             "(kernels from <artifacts>/variants)")
    args = parser.parse_args()

    if args.variants:
        if args.sanitize:
            return sanitize(args)
        if not torch.cuda.is_available():
            print("error: torch sees no CUDA device")
            return 2
        ok, summary = check_variants(args.artifacts, args.quick, args.filter)
        text = "\n".join(summary) + f"\n{'all passed' if ok else 'FAILED'}\n"
        print("\n" + text, end="")
        if args.summary:
            Path(args.summary).write_text(text)
        return 0 if ok else 1

    paths = find_flash_manifests(args.artifacts, args.filter)
    if args.sanitize:
        return sanitize(args)

    if not torch.cuda.is_available():
        print("error: torch sees no CUDA device")
        return 2
    ok, summary = check(paths, args.quick)
    text = "\n".join(summary) + f"\n{'all passed' if ok else 'FAILED'}\n"
    print("\n" + text, end="")
    if args.summary:
        Path(args.summary).write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
