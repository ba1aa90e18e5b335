#!/usr/bin/env python3
"""Training steps of a small Llama-architecture model (transformers, random
weights, nothing downloaded) with one sequence split across the ranks:
context parallelism through tilec.distributed's zigzag ring attention.

    torchrun --nproc_per_node=2 examples/ring_llama_train.py               # 2 GPUs, NCCL
    torchrun --nproc_per_node=2 examples/ring_llama_train.py --device cpu  # gloo + tilec's CPU runner
    python3 examples/ring_llama_train.py                                   # one rank (no torchrun)

Every rank builds the same model (same seed) and holds the zigzag shard of
the token ids, the labels (shifted on the full sequence before sharding)
and the position ids (so rotary embeddings see the true positions). Each
layer's attention is zigzag_ring_flash_attn_func over the group; everything
else in the model is per token and runs on the shard. The loss is the sum
over the shard divided by the sequence's token count, so the all-reduced
(summed) gradients are those of the full-sequence mean loss. With --check
(the default for the first step) every rank also runs the full sequence
through the same model on its own device with attn_implementation="tilec"
and prints the relative difference of the loss and of all gradients. In
bf16 expect ~1e-5 on the loss and ~1e-2 on the worst weight gradient (2
ranks on the CPU: 1.3e-5 and 1.15e-2): the bf16 level, as far as sdpa,
eager and tilec attention are from each other on one device (1.2-1.4e-2).
"""
import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
from transformers.masking_utils import AttentionMaskInterface

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import tilec.distributed as td  # noqa: E402
import tilec.integrations.transformers  # noqa: E402,F401  (registers "tilec", the --check reference)

RING = "tilec_ring"
_GROUP = None  # the context-parallel group (None: the default group)


def ring_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                           **kwargs):
    """transformers' attention interface: (batch, heads, seqlen_local, d)
    zigzag shards in, (batch, seqlen_local, heads, d) out."""
    if dropout:
        raise NotImplementedError("ring attention: dropout is not implemented; set attention_dropout=0")
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    out = td.zigzag_ring_flash_attn_func(q, k, v, causal=getattr(module, "is_causal", True),
                                         softmax_scale=scaling, group=_GROUP)
    return out, None


def no_mask(*args, **kwargs):
    """No mask: the ring's causal mask is over the global positions, and the
    zigzag position ids (which jump) are not packed sequences."""
    return None


AttentionInterface.register(RING, ring_attention_forward)
AttentionMaskInterface.register(RING, no_mask)


def build(args, device):
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.heads * args.head_dim,
                         intermediate_size=4 * args.heads * args.head_dim,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                         max_position_embeddings=max(4096, args.seqlen), attention_dropout=0.0)
    torch.manual_seed(args.seed)  # the same weights on every rank
    model = LlamaForCausalLM(config).to(dtype=args.dtype, device=device)
    model.train()
    return model


def shift_labels(ids):
    """labels[t] = ids[t + 1]; the last token has none (-100)."""
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    return labels


def loss_of(model, ids, labels, positions, tokens):
    logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                                             ignore_index=-100, reduction="sum")
    return loss / tokens


def step_ring(model, ids, labels, rank, world, device):
    """One forward+backward on this rank's zigzag shard; gradients summed
    over the ranks. Returns the full sequence's mean loss."""
    seqlen = ids.shape[1]
    tokens = int((labels != -100).sum())
    local_ids, local_labels = (td.zigzag_shard(t, rank, world) for t in (ids, labels))
    positions = td.zigzag_positions(seqlen, rank, world, device=device)[None].expand(ids.shape[0], -1)
    loss = loss_of(model, local_ids, local_labels, positions, tokens)
    loss.backward()
    total = loss.detach().clone()
    if world > 1:
        dist.all_reduce(total)
        for p in model.parameters():
            if p.grad is not None:
                # sum (each rank's loss is its share of the mean), in f32
                g = p.grad.float()
                dist.all_reduce(g)
                p.grad.copy_(g)
    return total.item()


def check(args, model, ids, labels, device):
    """Loss and gradients of the full sequence on this rank alone with
    attn_implementation="tilec": the relative difference of the loss and the
    largest relative difference over the parameters' gradients."""
    ref = build(args, device)
    ref.load_state_dict(model.state_dict())
    ref.set_attn_implementation("tilec")
    positions = torch.arange(ids.shape[1], device=device)[None].expand(ids.shape[0], -1)
    loss = loss_of(ref, ids, labels, positions, int((labels != -100).sum()))
    loss.backward()
    worst, worst_name = 0.0, ""
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is None or q.grad.norm() == 0:
            continue
        err = ((p.grad.double() - q.grad.double()).norm() / q.grad.double().norm()).item()
        if err > worst:
            worst, worst_name = err, name
    return loss.item(), worst, worst_name


def main(argv=None):
    global _GROUP
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--seqlen", type=int, default=0,
                        help="tokens in the one sequence (default 16384 on CUDA, 256 on the CPU)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-check", action="store_true", help="skip the full-sequence comparison")
    args = parser.parse_args(argv)
    args.dtype = getattr(torch, args.dtype)
    if not args.seqlen:
        args.seqlen = 16384 if args.device == "cuda" else 256

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if distributed:
        backend = "nccl" if args.device == "cuda" else "gloo"
        local = int(os.environ.get("LOCAL_RANK", 0))
        if args.device == "cuda":
            torch.cuda.set_device(local)
        dist.init_process_group(backend)
        rank, world = dist.get_rank(), dist.get_world_size()
        _GROUP = dist.group.WORLD
    else:
        rank, world = 0, 1
    device = torch.device(f"cuda:{torch.cuda.current_device()}") if args.device == "cuda" else \
        torch.device("cpu")
    if args.device == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    if args.seqlen % (2 * world):
        raise SystemExit(f"--seqlen {args.seqlen} must be a multiple of 2 * world size ({2 * world})")

    model = build(args, device)
    model.set_attn_implementation(RING)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed + 1)  # the same tokens on every rank
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"Llama {args.layers} layers, {args.heads}/{args.kv_heads} heads x {args.head_dim}, "
        f"{args.dtype}, {world} rank(s) on {args.device}, {args.batch} x {args.seqlen} tokens "
        f"({args.seqlen // world} per rank, zigzag)")
    for step in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.batch, args.seqlen), generator=gen).to(device)
        labels = shift_labels(ids)
        opt.zero_grad(set_to_none=True)
        if args.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step_ring(model, ids, labels, rank, world, device)
        if args.device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        line = f"step {step}: loss {loss:.4f}, forward+backward+all-reduce {elapsed * 1e3:.1f} ms"
        if step == 0 and not args.no_check and rank == 0:
            ref_loss, worst, name = check(args, model, ids, labels, device)
            line += (f"; full-sequence tilec on one device: loss {ref_loss:.4f} "
                     f"(relative difference {abs(loss - ref_loss) / abs(ref_loss):.1e}), "
                     f"gradients' largest relative difference {worst:.2e} ({name})")
        say(line)
        opt.step()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
