#!/usr/bin/env python3
"""A small Llama-architecture model with random weights (nothing downloaded)
run with attn_implementation="tilec" and "sdpa"; their logits are compared.

    python3 examples/llama_tilec.py                 # CUDA if present, else the CPU runner
    python3 examples/llama_tilec.py --kv-heads 2    # GQA: runs once the variants land (issue 15)

On the CPU (torch CPU tensors through tilec's CPU runner) it is slow but
exact to the kernel; on a GPU it launches the compiled kernels.
"""
import argparse
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import tilec.integrations.transformers  # noqa: E402,F401  (registers "tilec")


def build(args, attn_implementation):
    config = LlamaConfig(vocab_size=1000, hidden_size=args.heads * args.head_dim,
                         intermediate_size=4 * args.heads * args.head_dim, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads or args.heads,
                         head_dim=args.head_dim, max_position_embeddings=4096)
    torch.manual_seed(args.seed)  # same weights for both
    model = LlamaForCausalLM(config).to(dtype=args.dtype, device=args.device).eval()
    model.set_attn_implementation(attn_implementation)
    return model


def compare(args):
    """(relative norm of the logits' difference, max abs difference, argmax agreement)."""
    ids = torch.randint(0, 1000, (args.batch, args.seqlen), generator=torch.Generator().manual_seed(args.seed))
    ids = ids.to(args.device)
    logits = {}
    for impl in ("sdpa", "tilec"):
        with torch.no_grad():
            logits[impl] = build(args, impl)(input_ids=ids, use_cache=False).logits.double()
    diff = logits["tilec"] - logits["sdpa"]
    rel = (diff.norm() / logits["sdpa"].norm()).item()
    agree = (logits["tilec"].argmax(-1) == logits["sdpa"].argmax(-1)).double().mean().item()
    return rel, diff.abs().max().item(), agree


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=0, help="KV heads (default: heads, i.e. MHA)")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seqlen", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.dtype = getattr(torch, args.dtype)
    rel, max_abs, agree = compare(args)
    print(f"Llama {args.layers} layers, {args.heads}/{args.kv_heads or args.heads} heads x {args.head_dim}, "
          f"{args.dtype}, {args.device}, batch {args.batch} x {args.seqlen} tokens: tilec vs sdpa logits "
          f"relative difference {rel:.2e}, max |diff| {max_abs:.3g}, argmax agreement {agree:.1%}")
    return rel


if __name__ == "__main__":
    main()
