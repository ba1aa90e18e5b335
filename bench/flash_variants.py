"""The GPU correctness matrix of flash_attn's variants (GQA/MQA, bottom-right
causal, windows, softcap, ALiBi, varlen, odd head dims), shared by
scripts/build_artifacts.py (which compiles the kernels these cases launch
into <artifacts>/variants/) and bench/check_flash.py --variants (which runs
them through tilec's flash_attn API on the GPU). No torch import here: the
build host needs only the tilec package."""

# Each case: api "func" (batch, seqlen_q, seqlen_k) or "varlen" (lens_q,
# lens_k); heads q/k, head_dim, options of the flash_attn call; dtypes.
CASES = [
    dict(api="func", b=2, sq=17, sk=1000, hq=8, hk=2, d=128, opts={}),
    dict(api="func", b=2, sq=1000, sk=1000, hq=8, hk=1, d=64, opts=dict(causal=True)),
    dict(api="func", b=1, sq=100, sk=900, hq=4, hk=4, d=128, opts=dict(causal=True)),
    dict(api="func", b=1, sq=900, sk=100, hq=4, hk=2, d=128, opts=dict(causal=True)),
    dict(api="func", b=2, sq=1, sk=1000, hq=32, hk=8, d=128, opts=dict(causal=True)),
    dict(api="func", b=1, sq=2048, sk=2048, hq=4, hk=1, d=128, opts=dict(window_size=(256, 0))),
    dict(api="func", b=1, sq=1000, sk=1000, hq=4, hk=2, d=64, opts=dict(window_size=(100, 33))),
    dict(api="func", b=1, sq=900, sk=100, hq=2, hk=1, d=64, opts=dict(window_size=(10, 7))),
    dict(api="func", b=1, sq=300, sk=300, hq=2, hk=1, d=128, opts=dict(window_size=(5000, 5000))),
    dict(api="func", b=2, sq=1000, sk=1000, hq=8, hk=2, d=128, opts=dict(softcap=30.0, causal=True)),
    dict(api="func", b=2, sq=333, sk=777, hq=4, hk=4, d=64, opts=dict(softcap=5.0)),
    dict(api="func", b=2, sq=500, sk=700, hq=8, hk=8, d=128, opts=dict(alibi="h")),
    dict(api="func", b=2, sq=700, sk=500, hq=8, hk=2, d=64, opts=dict(alibi="bh", causal=True)),
    dict(api="func", b=1, sq=1000, sk=1000, hq=4, hk=1, d=128,
         opts=dict(alibi="bh", window_size=(128, 16), softcap=10.0)),
    dict(api="func", b=1, sq=257, sk=257, hq=2, hk=1, d=59, opts=dict(causal=True)),
    dict(api="func", b=1, sq=257, sk=300, hq=2, hk=2, d=80, opts={}),
    dict(api="func", b=1, sq=257, sk=300, hq=2, hk=1, d=111, opts=dict(window_size=(40, 40))),
    dict(api="func", b=1, sq=257, sk=300, hq=2, hk=1, d=192, opts=dict(causal=True)),
    dict(api="func", b=1, sq=200, sk=300, hq=2, hk=1, d=224, opts={}),
    dict(api="func", b=1, sq=200, sk=300, hq=2, hk=1, d=256, opts=dict(causal=True)),
    dict(api="varlen", lens_q=[100, 0, 1000, 17], lens_k=[3000, 5, 0, 17], hq=8, hk=2, d=128,
         opts=dict(causal=True)),
    dict(api="varlen", lens_q=[64, 129, 1], lens_k=[64, 129, 900], hq=4, hk=1, d=64,
         opts=dict(window_size=(32, 0), alibi="h")),
]
DTYPES = ("float16", "bfloat16")
QUICK = [0, 3, 5, 9, 12, 20]  # indices of the cases --quick runs (sanitizers)


# Kernels bench/bench_variants.py launches beyond the table's (bf16 d128):
# window (1024, 0) (causal with a left bound), causal softcap, causal ALiBi,
# causal varlen.
BENCH_KERNELS = [("bfloat16", 128, True, True, False, False, False),
                 ("bfloat16", 128, True, False, True, False, False),
                 ("bfloat16", 128, True, False, False, True, False),
                 ("bfloat16", 128, True, False, False, False, True)]


def case_label(case):
    shape = (f"b{case['b']} q{case['sq']} k{case['sk']}" if case["api"] == "func"
             else f"varlen q{case['lens_q']} k{case['lens_k']}")
    opts = " ".join(f"{k}={v}" for k, v in case["opts"].items())
    return f"{shape} h{case['hq']}/{case['hk']} d{case['d']} {opts}".strip()


def needed_kernels(fa):
    """(dtype, padded head_dim, causal, window, softcap, alibi, varlen) of every
    kernel the cases launch; fa is tilec.flash_attn (its own option handling
    decides which kernel a call runs)."""
    keys = set()
    for case in CASES:
        opts = case["opts"]
        left, right = opts.get("window_size", (-1, -1))
        if case["api"] == "func":
            sq, sk = case["sq"], case["sk"]
        else:
            sq, sk = max(case["lens_q"]), max(case["lens_k"])
        causal, window, _, _ = fa._mask_mode(opts.get("causal", False), left, right, sq, sk,
                                             opts.get("alibi"))
        padded = -(-case["d"] // 8) * 8
        for dtype in DTYPES:
            keys.add((dtype, padded, causal, window, opts.get("softcap", 0) > 0, "alibi" in opts,
                      case["api"] == "varlen"))
    return sorted(keys | set(BENCH_KERNELS))
