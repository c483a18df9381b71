#!/usr/bin/python3
"""The step of `normgrow bench` in PyTorch, for a side-by-side comparison.

The same shapes (teacher and student: hidden 512, 4 Pre-Norm Qwen3 blocks, 8 query and
4 key-value heads of 64, FFN 1536, vocabulary 8192, untied head, final norm; a batch of
8 x 256 tokens), the same step (teacher forward without gradients, student forward, CE +
KD at kd_weight 0.5 and temperature 2, backward, AdamW with global-norm clipping), in
on the CPU with torch's own kernels, and the same FLOP count as `normgrow bench`:
6 x matmul-params x tokens + 3 x attention for the student, 2 x params x tokens +
attention for the teacher, attention = 4 hd H T(T+1)/2 per sequence and layer.

Two steps in interleaved rounds (one step of each per round, so that a machine whose
load drifts slows both alike): float32, and bf16 autocast (torch.autocast on the CPU:
matmuls in bf16 with fp32 master weights, AdamW in fp32; the loss on the logits in fp32),
the counterpart of `normgrow bench`'s onednn bf16 step.

  python3 tools/bench_torch.py [--steps N] [--threads N]

Prints torch's fp32 and bf16 matmul ceilings at the head's shape, each step's median
time, tokens/s and GFLOP/s, and bf16 over fp32; run `normgrow bench` in the same minutes
and compare ratios, not seconds.
"""

import argparse
import os
import statistics
import time

# OpenMP threads wait passively after a short spin, as normgrow's do (it runs itself again
# with this policy): long-spinning threads starve on a shared machine. Set before torch
# loads its OpenMP runtime.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "passive"
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")

import torch  # noqa: E402 (after the OpenMP policy)
import torch.nn.functional as F

D, L, H, KV, HD, FF, V, B, T = 512, 4, 8, 4, 64, 1536, 8192, 8, 256
EPS, THETA = 1e-6, 1e6


def rms_norm(x, w):
    return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

        def p(*shape, std=0.02):
            return torch.nn.Parameter(torch.randn(*shape) * std)

        self.embed = p(V, D)
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            blk = torch.nn.Module()
            blk.q, blk.k, blk.v = p(H * HD, D), p(KV * HD, D), p(KV * HD, D)
            blk.o = p(D, H * HD)
            blk.qn, blk.kn = torch.nn.Parameter(torch.ones(HD)), torch.nn.Parameter(torch.ones(HD))
            blk.n_in, blk.n_pa = torch.nn.Parameter(torch.ones(D)), torch.nn.Parameter(torch.ones(D))
            blk.gate, blk.up, blk.down = p(FF, D), p(FF, D), p(D, FF)
            self.blocks.append(blk)
        self.norm = torch.nn.Parameter(torch.ones(D))
        self.head = p(V, D)
        inv = THETA ** (-torch.arange(0, HD // 2, dtype=torch.float64) * 2 / HD)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), dim=-1)
        self.cos, self.sin = ang.cos().float(), ang.sin().float()
        self.mask = torch.full((T, T), float("-inf")).triu(1)

    def attention(self, blk, x):
        q = (x @ blk.q.T).view(B, T, H, HD)
        k = (x @ blk.k.T).view(B, T, KV, HD)
        v = (x @ blk.v.T).view(B, T, KV, HD)
        q = rope(rms_norm(q, blk.qn).transpose(1, 2), self.cos, self.sin)
        k = rope(rms_norm(k, blk.kn).transpose(1, 2), self.cos, self.sin)
        v = v.transpose(1, 2)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        scores = q @ k.transpose(-1, -2) / HD ** 0.5 + self.mask
        out = torch.softmax(scores, dim=-1) @ v
        return out.transpose(1, 2).reshape(B, T, H * HD) @ blk.o.T

    def forward(self, tokens):
        x = self.embed[tokens]
        for blk in self.blocks:
            x = x + self.attention(blk, rms_norm(x, blk.n_in))
            h = rms_norm(x, blk.n_pa)
            x = x + (F.silu(h @ blk.gate.T) * (h @ blk.up.T)) @ blk.down.T
        return rms_norm(x, self.norm) @ self.head.T


def matmul_params():
    return V * D + L * (2 * H * HD * D + 2 * KV * HD * D + 3 * FF * D)


def flops():
    att = L * B * 4 * HD * H * T * (T + 1) / 2
    n = B * T
    return 6 * matmul_params() * n + 3 * att + 2 * matmul_params() * n + att


def ceiling(dtype):
    a, b = torch.randn(B * T, D).to(dtype), torch.randn(V, D).to(dtype)
    best = 0.0
    for r in range(4):
        t0 = time.perf_counter()
        a @ b.T
        g = 2 * B * T * V * D / (time.perf_counter() - t0) / 1e9
        best = max(best, g) if r else best
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch threads (default: all cores, as normgrow)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    teacher, student = Model(), Model()
    for p in teacher.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(student.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    tau, alpha = 2.0, 0.5

    def step(bf16):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            with torch.no_grad():
                t_logits = teacher(tokens)
            s_logits = student(tokens)
        t_logits, s_logits = t_logits.float(), s_logits.float()
        ce = F.cross_entropy(s_logits.view(-1, V), targets.view(-1))
        kd = F.kl_div(F.log_softmax(s_logits / tau, -1).view(-1, V),
                      F.log_softmax(t_logits / tau, -1).view(-1, V),
                      log_target=True, reduction="batchmean") * tau * tau
        loss = alpha * kd + (1 - alpha) * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()

    ceil = {False: ceiling(torch.float32), True: ceiling(torch.bfloat16)}
    times = {False: [], True: []}
    for bf16 in (False, True):
        step(bf16)  # warm-up
    for _ in range(args.steps):
        for bf16 in (False, True):
            t0 = time.perf_counter()
            step(bf16)
            times[bf16].append(time.perf_counter() - t0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; matmul ceilings at "
          f"[{B * T} x {D}] x [{V} x {D}]^T: fp32 {ceil[False]:.1f} GFLOP/s, "
          f"bf16 {ceil[True]:.1f} GFLOP/s; {args.steps} rounds of one step each")
    med = {}
    for bf16 in (False, True):
        t = med[bf16] = statistics.median(times[bf16])
        name = "bf16 autocast" if bf16 else "fp32"
        print(f"{name} step: {t:.3f} s (median of {args.steps}); throughput: "
              f"{B * T / t:.0f} tokens/s, {flops() / t / 1e9:.1f} GFLOP/s "
              f"({flops() / 1e9:.1f} GFLOP per step) = "
              f"{100 * flops() / t / 1e9 / ceil[bf16]:.0f}% of its matmul ceiling")
    print(f"bf16 autocast over fp32: {med[False] / med[True]:.2f}x tokens/s")


if __name__ == "__main__":
    main()
