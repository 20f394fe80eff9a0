#!/usr/bin/env python3
"""The plain PyTorch baseline of the benchmark: the same GPT as trainer (learned positions,
LayerNorm, tanh-GELU MLP, tied embeddings, biases; normal(0, init_std) init with the
residual projections scaled by 1/sqrt(2*layers); AdamW with the same hyper-parameters, no
decay on norms, biases and embeddings) on the same synthetic data, timed per step.
Single process (eager or torch.compile), or DDP over Gloo under torchrun. Prints one JSON line with the step times."""
import argparse, json, math, os, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x):
        B, S, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # fused, as trainer and nanoGPT
        x = x + self.proj(y.transpose(1, 2).reshape(B, S, H))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.wte = nn.Embedding(m["vocab_size"], m["hidden"])
        self.wpe = nn.Embedding(m["seq_len"], m["hidden"])
        self.blocks = nn.ModuleList(Block(m["hidden"], m["heads"], m["ffn"]) for _ in range(m["layers"]))
        self.ln_f = nn.LayerNorm(m["hidden"])
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * m["layers"]) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe.weight[: tokens.shape[1]]
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def synthetic(step, batch, seq, vocab, rank, world):
    g = torch.Generator().manual_seed(step * 1000003 + rank)
    start = torch.randint(0, vocab, (batch // world, 1), generator=g)
    stride = torch.randint(1, 8, (batch // world, 1), generator=g)
    seqs = (start + stride * torch.arange(seq + 1)) % vocab
    return seqs[:, :-1], seqs[:, 1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="JSON of the model section")
    ap.add_argument("--batch", type=int, required=True, help="global batch (samples)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (Inductor)")
    ap.add_argument("--bf16", action="store_true",
                    help="torch.autocast(cpu, bfloat16) around forward and loss: fp32 weights, bf16 matmuls")
    args = ap.parse_args()
    m = json.loads(args.config)
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    model = GPT(m)
    if args.compile:  # forward and backward through Inductor; the first steps compile (timed, dropped as warm-up)
        model = torch.compile(model)
    if world > 1:
        torch.distributed.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "wpe" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "wte" not in n and "wpe" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        tokens, targets = synthetic(step, args.batch, m["seq_len"], m["vocab_size"], rank, world)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = model(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        print(json.dumps({"step_times": times, "tokens_per_step": args.batch * m["seq_len"], "loss": loss.item()}))


if __name__ == "__main__":
    main()
