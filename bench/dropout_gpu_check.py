"""GPU check of the dropout audit (session 10): replays the RNG use of
upstream's test_flash_attn_varlen_output[0.0-0.17-1-147-32-True-False-False-
True-gqa-dtype0-False] on CUDA and compares tilec's mask with the Philox
counter model, element for element.

    python3 bench/dropout_gpu_check.py        (a few seconds; needs a CUDA GPU)

Prediction: the generator hands the call seed 0 and offset 20, the key
lengths are [127, 135, 140, 139]; on main before session 10's audit (counters
(offset + e, 0, 0, 0)) the mask drops 586 of 3246 elements (0.18053, so
upstream's |fraction - 0.17| <= 0.01 fails for this seed) with 0 mismatches
against "old"; on the audit branch (counters (offset/4 + e, 0, 0, 0)) 0
mismatches against "new". 0 mismatches means the GPU kernel's mask is
exactly the CPU runner's / the model's."""

import sys

import numpy as np
import torch

import tilec

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
U32 = np.uint64(0xFFFFFFFF)


def philox_word0(seed, counters):
    """Word 0 of Philox4x32-10 of the counters (lo, hi, 0, 0) under the key seed (numpy)."""
    c = np.asarray(counters, np.uint64)
    x = [c & U32, c >> np.uint64(32), np.zeros_like(c), np.zeros_like(c)]
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    for _ in range(10):
        p0, p1 = x[0] * np.uint64(M0), x[2] * np.uint64(M1)
        x = [(p1 >> np.uint64(32)) ^ x[1] ^ np.uint64(k0), p1 & U32,
             (p0 >> np.uint64(32)) ^ x[3] ^ np.uint64(k1), p0 & U32]
        k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
    return x[0]


def main():
    if not torch.cuda.is_available():
        print("no CUDA GPU")
        return 2
    dev, p, hq, hk, d = "cuda", 0.17, 6, 2, 32
    torch.random.manual_seed(0)  # the test's RNG use, in its order
    q = torch.randn(4, 1, hq, d, device=dev, dtype=torch.float16, requires_grad=True)
    k = torch.randn(4, 147, hk, d, device=dev, dtype=torch.float16, requires_grad=True)
    v = torch.randn(4, 147, hk, d, device=dev, dtype=torch.float16, requires_grad=True)
    lens_q = torch.randint(1, 2, (4, 1), device=dev).flatten().tolist()
    lens_k = torch.randint(127, 148, (4, 1), device=dev).flatten().tolist()
    gen = torch.cuda.default_generators[q.get_device()]
    seed, offset = gen.initial_seed(), gen.get_offset()
    print(f"torch {torch.__version__}; seed {seed} offset {offset}; lens_q {lens_q} lens_k {lens_k}")
    q_unpad = torch.cat([q[b, :lens_q[b]] for b in range(4)])
    k_unpad = torch.cat([k[b, :lens_k[b]] for b in range(4)])
    v_unpad = torch.cat([v[b, :lens_k[b]] for b in range(4)])
    cu = lambda lens: torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=dev)  # noqa: E731
    max_k = max(lens_k)
    out, _, S = tilec.flash_attn_varlen_func(q_unpad, k_unpad, v_unpad, cu(lens_q), cu(lens_k), max(lens_q),
                                             max_k, p, causal=True, deterministic=True,
                                             return_attn_probs=True)
    torch.cuda.synchronize()
    print(f"generator offset after the call: {gen.get_offset()} ({4 * max_k * hq * 4} more: "
          f"rng_offset = offset/4; {max_k * hq * 4} more: the old rng_offset = offset)")
    dropped = valid = 0
    mismatches = {"old": 0, "new": 0}
    for b in range(4):
        n = lens_k[b]
        got = torch.signbit(S[b, :, 0, :n]).cpu().numpy()  # dropped (seqlen_q 1: row 0)
        for h in range(hq):
            e = np.uint64((b * hq + h) * max_k) + np.arange(n, dtype=np.uint64)
            for name, word in (("old", philox_word0(seed, e + np.uint64(offset))),
                               ("new", philox_word0(seed, e + np.uint64(offset // 4)))):
                u = (word >> np.uint64(8)) * 2.0 ** -24
                mismatches[name] += int((got[h] != (u < p)).sum())
        dropped += int(got.sum())
        valid += got.size
    frac = dropped / valid
    print(f"dropped {dropped} of {valid}: fraction {frac:.5f} (|dev| {abs(frac - p):.5f}, "
          f"upstream's assert {'passes' if abs(frac - p) <= 0.01 else 'FAILS'}); mismatches against "
          f"counters (offset + e, 0, 0, 0) (old): {mismatches['old']}, (offset/4 + e, 0, 0, 0) "
          f"(new): {mismatches['new']}")
    return 0 if 0 in mismatches.values() else 1


if __name__ == "__main__":
    sys.exit(main())
