#!/usr/bin/env python3
"""tilec's flash_attn API against flash-attention's own reference and
tolerance rule, on random draws of its test matrix (forward only).

Reads the reference helpers (attention_ref, construct_local_mask,
attn_bias_from_alibi_slopes, generate_qkv, ...) from a copy of
flash-attention's tests/test_flash_attn.py given on the command line — this
repository carries none of its code — and, for each sampled case of
test_flash_attn_output / test_flash_attn_varlen_output (dropout 0), checks
upstream's criterion: max|out - ref| <= 2 * max|out_pt - ref|, where ref is
the float32 reference and out_pt the same computation in the input dtype.
unpad_input/pad_input (flash_attn.bert_padding) are re-implemented here.
Needs einops. --device cpu runs the CPU runner (as CI can), cuda the GPU.

    python3 bench/upstream_reference_check.py --tests flash-attention/tests/test_flash_attn.py \\
        [--device cuda] [--cases 200] [--seed 0] [--varlen]
"""
import argparse
import itertools
import math
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "python")]


def unpad_input(x, mask):
    """(b, s, ...) and a (b, s) bool mask -> (tokens, ...), indices, cu_seqlens, max_seqlen, seqlens."""
    seqlens = mask.sum(-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu = F.pad(torch.cumsum(seqlens, 0, dtype=torch.int32), (1, 0))
    return x.reshape(-1, *x.shape[2:])[indices], indices, cu, int(seqlens.max()), seqlens


def pad_input(x, indices, batch, seqlen):
    out = torch.zeros(batch * seqlen, *x.shape[1:], dtype=x.dtype, device=x.device)
    out[indices] = x
    return out.reshape(batch, seqlen, *x.shape[1:])


def load_reference(path):
    from einops import rearrange, repeat

    lines = Path(path).read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("def attn_bias_from_alibi_slopes"))
    end = next(i for i, l in enumerate(lines) if l.startswith("def generate_sparsity_mask"))
    ns = dict(torch=torch, F=F, math=math, rearrange=rearrange, repeat=repeat,
              unpad_input=unpad_input, pad_input=pad_input)
    exec("\n".join(lines[start:end]), ns)  # upstream's helpers, from the user's copy
    return ns


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", required=True, help="flash-attention's tests/test_flash_attn.py")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--varlen", action="store_true", help="test_flash_attn_varlen_output's cases")
    args = parser.parse_args()
    ns = load_reference(args.tests)
    import tilec

    dev = args.device
    seqlens = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024),
               (1023, 1024), (1024, 1023), (1, 139), (203, 113)]
    if dev == "cpu":
        seqlens = [s for s in seqlens if max(s) <= 512]
    dims = [32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256]
    combos = list(itertools.product(seqlens, dims, [False, True], [False, True], [False, True],
                                    ["mha", "mqa", "gqa"], [torch.float16, torch.bfloat16],
                                    [False, True], [0.0, 50.0]))
    random.Random(args.seed).shuffle(combos)
    fails = 0
    for (sq, sk), d, causal, local, alibi, mha, dtype, kvpacked, softcap in combos[:args.cases]:
        torch.random.manual_seed(0)
        b, heads = 4, 6 if softcap == 0 else 4
        heads_k = heads if mha == "mha" else (1 if mha == "mqa" else 2)
        window = (-1, -1) if not local else torch.randint(0, sk, (2,))
        q = torch.randn(b, sq, heads, d, device=dev, dtype=dtype)
        if softcap > 0:
            q = q * softcap
        k, v = (torch.randn(b, sk, heads_k, d, device=dev, dtype=dtype) for _ in range(2))
        qpm = kpm = None
        if args.varlen:
            qpm = ns["generate_random_padding_mask"](sq, b, dev, mode="random")
            kpm = ns["generate_random_padding_mask"](sk, b, dev, mode="random")
        slopes = torch.rand(b, heads, device=dev, dtype=torch.float32) * 0.3 if alibi else None
        bias = (ns["attn_bias_from_alibi_slopes"](slopes, sq, sk, qpm, kpm, causal=causal)
                if alibi else None)
        opts = dict(causal=causal, window_size=window, softcap=softcap)
        if args.varlen:
            (qu, ku, vu, cu_q, cu_k, mq, mk, q, k, v, pad_fn, _, _) = ns["generate_qkv"](q, k, v, qpm, kpm)
            out = pad_fn(tilec.flash_attn_varlen_func(qu, ku, vu, cu_q, cu_k, mq, mk, 0.0,
                                                      alibi_slopes=slopes, **opts))
        elif kvpacked:
            out = tilec.flash_attn_kvpacked_func(q, torch.stack([k, v], dim=2), 0.0,
                                                 alibi_slopes=slopes, **opts)
        else:
            out = tilec.flash_attn_func(q, k, v, 0.0, alibi_slopes=slopes, **opts)
        ref, _ = ns["attention_ref"](q, k, v, qpm, kpm, bias, 0.0, None, **opts)
        pt, _ = ns["attention_ref"](q, k, v, qpm, kpm, bias, 0.0, None, upcast=False,
                                    reorder_ops=True, **opts)
        err, err_pt = (out - ref).abs().max().item(), (pt - ref).abs().max().item()
        ok = err <= 2 * err_pt
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} sq{sq} sk{sk} d{d} causal={causal} "
              f"window={tuple(int(w) for w in window)} alibi={alibi} {mha} {str(dtype)[6:]} "
              f"{'varlen' if args.varlen else 'kvpacked' if kvpacked else 'func'} softcap={softcap}: "
              f"{err:.2e} vs 2 * {err_pt:.2e}", flush=True)
    print(f"{args.cases - fails}/{args.cases} passed upstream's criterion")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
