#!/usr/bin/python3
"""Cross-check `normgrow golden-eval` against an independent float64 PyTorch model.

This file is a second, independent implementation of the golden contract (docs/golden-contract.md), the numerical
contract of golden cases; it shares no code with the C reference. Every `out.*`
tensor of a golden case (logits, losses, hidden states and their RMS,
gradients, one AdamW step, the per-block ablation CE and, for a case with a
top-k teacher, the top-k KD, its loss and its gradient w.r.t. the logits) is
computed here in float64 with torch autograd, from the float32 inputs of the
case, and compared with what the binary writes.

Modes:
  --cases N --seed S   generate N random cases, check the binary on each
  --case FILE...       check existing case files (e.g. golden/*.safetensors)
  --self-test          check this implementation itself (no binary needed):
                       autograd against finite differences, the losses against
                       torch.nn.functional, the AdamW step against
                       torch.optim.AdamW, the ablation of a block that is
                       the identity, and the top-k KD: exact at k = V, below
                       the exact KD at k < V, autograd against differences.

Tolerances (docs/golden-contract.md), per tensor, err = max|got - exp| / max|exp| (max|got|
when exp is all zero): forward outputs 1e-4 (topk_kd and topk_loss are losses),
gradients 1e-3 (topk_dlogits is one); AdamW step: the
update within 0.02 * lr on entries whose clipped gradient is not negligible.
Gradients have the contract's scale floor: an out.grad.* tensor's error is divided by
max(max|exp|, 1e-3 G), G the largest max|exp| over the case's out.grad.*, and the step
is compared where |clipped g| > max(1e-3 G_clipped, 100 eps).

Safetensors files are read and written here with json + struct + numpy.
Run with Debian's python3-torch: /usr/bin/python3 tools/crosscheck_torch.py.
"""

import argparse
import json
import math
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
REPO = Path(__file__).resolve().parent.parent
FORMAT = "normgrow-golden-1"
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6)

FAMILIES = ("logits", "hidden", "rms", "losses", "ablation", "grad", "step")
# Per-family bound on the error; for "step" the error is in units of lr.
TOLERANCE = {"logits": 1e-4, "hidden": 1e-4, "rms": 1e-4, "losses": 1e-4,
             "ablation": 1e-4, "grad": 1e-3, "step": 0.02}


# ----------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------

NUMPY_DTYPE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
               "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
ST_DTYPE = {np.dtype(v): k for k, v in NUMPY_DTYPE.items()}


def read_safetensors(path):
    """Returns ({name: numpy array}, {metadata key: string})."""
    raw = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + header_len])
    data = raw[8 + header_len:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in NUMPY_DTYPE:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        flat = np.frombuffer(data[begin:end], dtype=NUMPY_DTYPE[info["dtype"]])
        tensors[name] = flat.reshape(info["shape"])
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    """Writes {name: numpy array} (in that order) with string metadata."""
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, array in tensors.items():
        dtype = np.dtype(array.dtype).newbyteorder("<")
        blob = np.ascontiguousarray(array, dtype=dtype).tobytes()
        header[name] = {"dtype": ST_DTYPE[dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ----------------------------------------------------------------------------
# the model of the golden contract, float64
# ----------------------------------------------------------------------------

def block_placement(m, i):
    """The placement block i (0-based) computes: mixln's first mixln_post_layers
    blocks are post, its others pre; hybrid's block i is layer_placements[i]
    ("pre" or "post")."""
    if m["norm_placement"] == "mixln":
        return "post" if i < m["mixln_post_layers"] else "pre"
    if m["norm_placement"] == "hybrid":
        placement = m["layer_placements"][i]
        if placement not in ("pre", "post"):
            raise ValueError(f"model.layer_placements[{i}]: {placement!r} is neither pre nor post")
        return placement
    return m["norm_placement"]


def layer_param_shapes(m, i):
    """{HF name: shape} of the weights of block i."""
    D, F, hd = m["hidden_size"], m["intermediate_size"], m["head_dim"]
    q, kv = m["num_attention_heads"] * hd, m["num_key_value_heads"] * hd
    p = f"model.layers.{i}."
    shapes = {p + "self_attn.q_proj.weight": [q, D], p + "self_attn.k_proj.weight": [kv, D],
              p + "self_attn.v_proj.weight": [kv, D], p + "self_attn.o_proj.weight": [D, q],
              p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
              p + "mlp.gate_proj.weight": [F, D], p + "mlp.up_proj.weight": [F, D],
              p + "mlp.down_proj.weight": [D, F], p + "post_attention_layernorm.weight": [D]}
    placement = block_placement(m, i)
    if placement in ("pre", "lns", "sandwich"):
        shapes[p + "input_layernorm.weight"] = [D]
    if placement in ("post", "deepnorm", "sandwich"):
        shapes[p + "post_feedforward_layernorm.weight"] = [D]
    if placement == "sandwich":
        shapes[p + "pre_feedforward_layernorm.weight"] = [D]
    if "layer_scale_init" in m:  # LayerScale: per-channel scales of the sublayers' branch terms
        shapes[p + "self_attn.layer_scale"] = [D]
        shapes[p + "mlp.layer_scale"] = [D]
    return shapes


def param_shapes(m):
    """{HF name: shape} of every weight of the model config m."""
    V, D = m["vocab_size"], m["hidden_size"]
    shapes = {"model.embed_tokens.weight": [V, D]}
    for i in range(m["num_hidden_layers"]):
        shapes.update(layer_param_shapes(m, i))
    if m["final_norm"]:
        shapes["model.norm.weight"] = [D]
    if not m["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [V, D]
    return shapes


def rms_norm(x, w, eps):
    return w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rotary(x, theta):
    """Rotate-half RoPE on x [B, T, heads, hd]; positions 0..T-1."""
    T, hd = x.shape[1], x.shape[-1]
    inv_freq = theta ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64) / hd)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angle.cos(), angle.cos()], -1)[None, :, None, :]
    sin = torch.cat([angle.sin(), angle.sin()], -1)[None, :, None, :]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention(x, p, prefix, m):
    B, T, _ = x.shape
    H, KV, hd = m["num_attention_heads"], m["num_key_value_heads"], m["head_dim"]
    eps = m["rms_norm_eps"]
    q = (x @ p[prefix + "q_proj.weight"].T).view(B, T, H, hd)
    k = (x @ p[prefix + "k_proj.weight"].T).view(B, T, KV, hd)
    v = (x @ p[prefix + "v_proj.weight"].T).view(B, T, KV, hd)
    q = rotary(rms_norm(q, p[prefix + "q_norm.weight"], eps), m["rope_theta"])
    k = rotary(rms_norm(k, p[prefix + "k_norm.weight"], eps), m["rope_theta"])
    kv_of_head = torch.arange(H) // (H // KV)
    q = q.transpose(1, 2)                                                    # [B, H, T, hd]
    k = k[:, :, kv_of_head].transpose(1, 2)
    v = v[:, :, kv_of_head].transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)                        # [B, H, T, T]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    probs = scores.masked_fill(future, float("-inf")).softmax(-1)
    heads = (probs @ v).transpose(1, 2).reshape(B, T, H * hd)             # head-major
    return heads @ p[prefix + "o_proj.weight"].T


def mlp(x, p, prefix):
    gate = torch.nn.functional.silu(x @ p[prefix + "gate_proj.weight"].T)
    up = x @ p[prefix + "up_proj.weight"].T
    return (gate * up) @ p[prefix + "down_proj.weight"].T


def block(x, p, i, m):
    pre = f"model.layers.{i}."

    def norm(y, name):
        return rms_norm(y, p[pre + name + ".weight"], m["rms_norm_eps"])

    def scaled(y, sub):  # y, sublayer sub's branch term, times its gamma with LayerScale
        return y * p.get(pre + sub + "layer_scale", 1.0)

    placement = block_placement(m, i)
    if placement in ("pre", "lns"):  # lns: norm outputs / sqrt(l), l = i + 1
        c = 1 / math.sqrt(i + 1) if placement == "lns" else 1.0
        a = x + scaled(attention(c * norm(x, "input_layernorm"), p, pre + "self_attn.", m),
                       "self_attn.")
        return a + scaled(mlp(c * norm(a, "post_attention_layernorm"), p, pre + "mlp."), "mlp.")
    if placement == "sandwich":  # Peri-LN: each sublayer's input and output normed
        a = x + scaled(norm(attention(norm(x, "input_layernorm"), p, pre + "self_attn.", m),
                            "post_attention_layernorm"), "self_attn.")
        return a + scaled(norm(mlp(norm(a, "pre_feedforward_layernorm"), p, pre + "mlp."),
                               "post_feedforward_layernorm"), "mlp.")
    alpha = m["deepnorm_alpha"] if placement == "deepnorm" else 1.0  # post: alpha 1
    a = norm(alpha * x + scaled(attention(x, p, pre + "self_attn.", m), "self_attn."),
             "post_attention_layernorm")
    return norm(alpha * a + scaled(mlp(a, p, pre + "mlp."), "mlp."), "post_feedforward_layernorm")


def forward(p, tokens, m, skip=None):
    """Returns (logits, [hidden_0..hidden_L]); block `skip` (0-based) is the identity."""
    hiddens = [p["model.embed_tokens.weight"][tokens]]
    for i in range(m["num_hidden_layers"]):
        x = hiddens[-1]
        hiddens.append(x if i == skip else block(x, p, i, m))
    h = hiddens[-1]
    if m["final_norm"]:
        h = rms_norm(h, p["model.norm.weight"], m["rms_norm_eps"])
    head = p["model.embed_tokens.weight" if m["tie_word_embeddings"] else "lm_head.weight"]
    return h @ head.T, hiddens


def plogp(log_a, log_b):
    """a (log_a - log_b) per entry, 0 where a = 0 (an empty bucket)."""
    a = log_a.exp()
    return a * torch.where(a > 0, log_a - log_b, torch.zeros_like(a))


def divergence(log_t, log_s, loss_cfg):
    """The kd divergence summed over the last dimension (buckets), from the
    teacher's and the student's log-probabilities: loss.divergence forward_kl
    (default) KL(t || s), reverse_kl KL(s || t), jsd beta KL(t || m) +
    (1 - beta) KL(s || m) with m = beta t + (1 - beta) s."""
    kind = loss_cfg.get("divergence", "forward_kl")
    if kind == "forward_kl":
        return plogp(log_t, log_s).sum(-1)
    if kind == "reverse_kl":
        return plogp(log_s, log_t).sum(-1)
    if kind == "jsd":
        beta = loss_cfg["beta"]
        log_m = torch.logaddexp(log_t + math.log(beta), log_s + math.log1p(-beta))
        return (beta * plogp(log_t, log_m) + (1 - beta) * plogp(log_s, log_m)).sum(-1)
    raise ValueError(f"loss.divergence: {kind!r}")


def losses(logits, targets, teacher, loss_cfg):
    """(ce, kd, loss) as 0-dim tensors; means over targets != -1 (0 when none)."""
    keep = targets != -1
    count = max(int(keep.sum()), 1)
    logp = logits.log_softmax(-1)
    nll = -logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    ce = (nll * keep).sum() / count
    if teacher is None:
        return ce, torch.zeros(()), ce
    tau, alpha = loss_cfg["temperature"], loss_cfg["kd_weight"]
    log_t = (teacher / tau).log_softmax(-1)
    log_s = (logits / tau).log_softmax(-1)
    kl = divergence(log_t, log_s, loss_cfg)
    kd = tau * tau * (kl * keep).sum() / count
    return ce, kd, alpha * kd + (1 - alpha) * ce


def topk_kd(logits, targets, topk, loss_cfg):
    """tau^2 x mean over targets != -1 of D(Q, P) (loss.divergence) between the bucketed teacher
    Q and student P over {the k cached ids, everything else} (0 when no target).

    topk = (ids [B, T, k], values [B, T, k], lse [B, T], rest [B, T] or None):
    Q_j = exp(v_j / tau - lse) on the cached ids, Q_rest = exp(rest), or without
    rest max(1 - sum_j Q_j, 0); P = softmax(logits / tau) on the cached ids and
    P_rest its mass on the other ids (= 1 - sum_j P_j). The rest term is 0 when
    Q_rest = 0, and when k = V: the bucket is then empty (P_rest = 0)."""
    ids, values, lse, rest = topk
    tau = loss_cfg["temperature"]
    keep = targets != -1
    count = max(int(keep.sum()), 1)
    log_p = (logits / tau).log_softmax(-1)
    log_q = values / tau - lse[..., None]
    log_pb = log_p.gather(-1, ids)
    if ids.shape[-1] < logits.shape[-1]:
        cached = torch.zeros(logits.shape, dtype=torch.bool).scatter(-1, ids, True)
        p_rest = log_p.exp().masked_fill(cached, 0.0).sum(-1)
        log_q_rest = rest if rest is not None else (1 - log_q.exp().sum(-1)).clamp(min=0.0).log()
        log_q = torch.cat([log_q, log_q_rest[..., None]], -1)
        log_pb = torch.cat([log_pb, p_rest.log()[..., None]], -1)
    kl = divergence(log_q, log_pb, loss_cfg)
    return tau * tau * (kl * keep).sum() / count


def topk_terms(logits, targets, topk, loss_cfg):
    """(topk_kd, topk_loss, d topk_loss / d logits) with autograd on a copy of the
    logits; topk_loss = alpha topk_kd + (1 - alpha) ce."""
    s = logits.detach().clone().requires_grad_(True)
    ce = losses(s, targets, None, loss_cfg)[0]
    kd = topk_kd(s, targets, topk, loss_cfg)
    alpha = loss_cfg["kd_weight"]
    loss = alpha * kd + (1 - alpha) * ce
    (grad,) = torch.autograd.grad(loss, s)
    return kd.detach(), loss.detach(), grad


def teacher_topk(teacher, k, tau):
    """The top-k cache of teacher logits [B, T, V], float64: (ids, values, lse, rest),
    rest the log mass off the k ids, summed over them (-inf at k = V)."""
    values, ids = torch.topk(teacher, k, dim=-1)
    lse = torch.logsumexp(teacher / tau, -1)
    off = (teacher / tau).scatter(-1, ids, -math.inf)
    return ids, values, lse, torch.logsumexp(off, -1) - lse


def adamw_step(params, grads, o):
    """One AdamW step (t = 1) as the golden contract: returns (new params, clipped grads, norm)."""
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
    coef = o["grad_clip"] / (norm + CLIP_EPS) if o["grad_clip"] > 0 else 1.0
    if coef < 1:
        grads = {n: g * coef for n, g in grads.items()}
    t, b1, b2 = 1, o["beta1"], o["beta2"]
    stepped = {}
    for name, p in params.items():
        g = grads[name]
        if p.dim() >= 2:
            p = p * (1 - o["lr"] * o["weight_decay"])
        m_hat = (1 - b1) * g / (1 - b1 ** t)
        v_hat = (1 - b2) * g * g / (1 - b2 ** t)
        stepped[name] = p - o["lr"] * m_hat / (v_hat.sqrt() + o["eps"])
    return stepped, grads, norm


# ----------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------

class Case:
    """A golden case: config (dict of model/loss/optim), inputs and float64 params.
    topk: None or the top-k teacher (ids int64 [B, T, k], values [B, T, k], lse [B, T],
    rest [B, T] or None)."""

    def __init__(self, config, tokens, targets, teacher, params, topk=None):
        self.config, self.model = config, config["model"]
        self.tokens, self.targets, self.teacher, self.params = tokens, targets, teacher, params
        self.topk = topk

    @classmethod
    def load(cls, path):
        tensors, metadata = read_safetensors(path)
        if metadata.get("format") != FORMAT:
            raise ValueError(f"{path}: __metadata__.format is not {FORMAT!r}")
        config = json.loads(metadata["config"])
        params = {n[len("param."):]: torch.from_numpy(a.astype(np.float64))
                  for n, a in tensors.items() if n.startswith("param.")}
        shapes = param_shapes(config["model"])
        if {n: list(t.shape) for n, t in params.items()} != shapes:
            raise ValueError(f"{path}: param.* tensors do not match the config: "
                             f"expected {shapes}")
        teacher = tensors.get("in.teacher_logits")
        tokens = torch.from_numpy(tensors["in.tokens"].astype(np.int64))
        return cls(config, tokens, torch.from_numpy(tensors["in.targets"].astype(np.int64)),
                   None if teacher is None else torch.from_numpy(teacher.astype(np.float64)),
                   {n: params[n] for n in shapes},
                   load_topk(tensors, list(tokens.shape), config["model"]["vocab_size"], path))

    def save(self, path):
        tensors = {"in.tokens": self.tokens.numpy().astype(np.int32),
                   "in.targets": self.targets.numpy().astype(np.int32)}
        if self.teacher is not None:
            tensors["in.teacher_logits"] = self.teacher.numpy().astype(np.float32)
        if self.topk is not None:
            ids, values, lse, rest = self.topk
            tensors.update({TOPK_INPUTS[0]: ids.numpy().astype(np.int32),
                            TOPK_INPUTS[1]: values.numpy().astype(np.float32),
                            TOPK_INPUTS[2]: lse.numpy().astype(np.float32)})
            if rest is not None:
                tensors[TOPK_REST] = rest.numpy().astype(np.float32)
        for name, p in self.params.items():
            tensors["param." + name] = p.numpy().astype(np.float32)
        write_safetensors(path, tensors, {"format": FORMAT, "config": json.dumps(self.config)})

    def summary(self):
        m, B, T = self.model, *self.tokens.shape
        placement = m["norm_placement"] + (f" alpha {m['deepnorm_alpha']:.3g}" if "deepnorm_alpha" in m
                                           else f" P{m['mixln_post_layers']}" if "mixln_post_layers" in m
                                           else " " + "/".join(m["layer_placements"])
                                           if "layer_placements" in m else "")
        parts = [placement, f"V{m['vocab_size']} D{m['hidden_size']}",
                 f"F{m['intermediate_size']} L{m['num_hidden_layers']}",
                 f"H{m['num_attention_heads']}/{m['num_key_value_heads']}x{m['head_dim']}",
                 f"B{B}xT{T}", "tied" if m["tie_word_embeddings"] else "untied",
                 "fnorm" if m["final_norm"] else "nofnorm",
                 (self.config["loss"].get("divergence", "forward_kl")
                  if self.teacher is not None else "ce"),
                 (f"topk{self.topk[0].shape[-1]}" + ("+rest" if self.topk[3] is not None else ""))
                 if self.topk is not None else "notopk",
                 f"ign{int((self.targets == -1).sum())}"]
        if "layer_scale_init" in m:
            parts.insert(1, "layerscale")
        return " ".join(parts)


TOPK_INPUTS = ("in.teacher_topk_ids", "in.teacher_topk_values", "in.teacher_topk_lse")
TOPK_REST = "in.teacher_topk_rest"


def load_topk(tensors, BT, V, path):
    """The top-k teacher inputs of a case file as Case.topk (None when absent);
    all three or none, shapes [B, T, k] (1 <= k <= V), [B, T, k], [B, T], I32 ids
    distinct per position in [0, V), F32 values and lse; with them optionally
    F32 rest [B, T], log-masses (at most 0)."""
    present = [n for n in TOPK_INPUTS if n in tensors]
    if not present and TOPK_REST not in tensors:
        return None
    if len(present) < 3:
        raise ValueError(f"{path}: {', '.join(TOPK_INPUTS)}: give all three or none "
                         f"({TOPK_REST} only with them)")
    ids, values, lse = (tensors[n] for n in TOPK_INPUTS)
    k = ids.shape[-1] if ids.ndim == 3 else 0
    if (ids.dtype != np.int32 or values.dtype != np.float32 or lse.dtype != np.float32
            or list(ids.shape) != BT + [k] or not 1 <= k <= V
            or list(values.shape) != BT + [k] or list(lse.shape) != BT):
        raise ValueError(f"{path}: top-k inputs: expected I32 ids and F32 values [B, T, k] "
                         f"with 1 <= k <= {V}, F32 lse [B, T], B, T = {BT}")
    if ids.min() < 0 or ids.max() >= V or (np.diff(np.sort(ids, -1), axis=-1) == 0).any():
        raise ValueError(f"{path}: in.teacher_topk_ids: ids not distinct in [0, {V})")
    rest = tensors.get(TOPK_REST)
    if rest is not None and (rest.dtype != np.float32 or list(rest.shape) != BT
                             or not (rest <= 0).all()):
        raise ValueError(f"{path}: {TOPK_REST}: expected F32 [B, T] log-masses (at most 0), "
                         f"B, T = {BT}")
    return (torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(values.astype(np.float64)),
            torch.from_numpy(lse.astype(np.float64)),
            None if rest is None else torch.from_numpy(rest.astype(np.float64)))


def f32(array):
    """float64 tensor holding the float32 rounding of array (what a case file stores)."""
    return torch.from_numpy(np.asarray(array, dtype=np.float32).astype(np.float64))


def random_model(rng, kv_ratio, placement, tied, final_norm, layer_scale=False):
    kv = int(rng.integers(1, 4))
    heads, head_dim = kv * kv_ratio, 2 * int(rng.integers(1, 9))
    hidden = int(rng.integers(8, 49))
    if rng.random() < 0.25 and 8 <= heads * head_dim <= 48:
        hidden = heads * head_dim
    m = {"vocab_size": int(rng.integers(16, 65)), "hidden_size": hidden,
         "intermediate_size": int(rng.integers(8, 65)),
         "num_hidden_layers": int(rng.integers(1, 4)), "num_attention_heads": heads,
         "num_key_value_heads": kv, "head_dim": head_dim,
         "rope_theta": float(10 ** rng.uniform(2, 6)),
         "rms_norm_eps": float(rng.choice([1e-6, 1e-5])),
         "tie_word_embeddings": tied, "norm_placement": placement, "final_norm": final_norm,
         **({"layer_scale_init": 0.01} if layer_scale else {})}
    if placement == "deepnorm":  # around DeepNet's (2 L)^(1/4)
        m["deepnorm_alpha"] = float(rng.uniform(0.5, 2.5))
    if placement == "mixln":
        m["mixln_post_layers"] = int(rng.integers(0, m["num_hidden_layers"] + 1))
    if placement == "hybrid":  # each block pre or post, in any order
        m["layer_placements"] = [str(p) for p in rng.choice(["pre", "post"], m["num_hidden_layers"])]
    return m


def random_params(rng, m):
    """Embeddings ~ N(0, 1); lm_head ~ N(0, 1/D) (logits of the order of the hidden
    RMS); other matrices ~ N(0, 0.3^2); norm gains and layer scales 1 + 0.2 N(0, 1)."""
    params = {}
    for name, shape in param_shapes(m).items():
        if name == "model.embed_tokens.weight":
            values = rng.normal(size=shape)
        elif name == "lm_head.weight":
            values = rng.normal(size=shape) / math.sqrt(m["hidden_size"])
        elif len(shape) == 2:
            values = 0.3 * rng.normal(size=shape)
        else:
            values = 1 + 0.2 * rng.normal(size=shape)
        params[name] = f32(values)
    return params


def random_targets(rng, V, B, T, ignore_all):
    targets = rng.integers(0, V, size=(B, T))
    targets[rng.random((B, T)) < 0.2] = -1
    if B > 1 and rng.random() < 0.3:
        targets[rng.integers(0, B)] = -1
    if ignore_all:
        targets[:] = -1
    elif (targets == -1).all():  # keep the whole-batch-ignored case rare
        targets.flat[rng.integers(0, B * T)] = rng.integers(0, V)
    return torch.from_numpy(targets)


def random_case(rng, features):
    """features: placement, tied, final_norm, teacher, clip, kv_ratio, ignore_all and
    optionally topk (see with_topk; it draws nothing from rng) and layer_scale."""
    m = random_model(rng, features["kv_ratio"], features["placement"], features["tied"],
                     features["final_norm"], features.get("layer_scale", False))
    B, T, V = int(rng.integers(1, 4)), int(rng.integers(1, 10)), m["vocab_size"]
    config = {"model": m,
              "loss": {"kd_weight": float(rng.uniform(0.1, 0.9)),
                       "temperature": float(rng.uniform(0.5, 3.0))},
              "optim": {"lr": float(10 ** rng.uniform(-3, -2)),
                        "beta1": float(rng.uniform(0.8, 0.95)),
                        "beta2": float(rng.uniform(0.95, 0.999)), "eps": 1e-8,
                        "weight_decay": float(rng.uniform(0.01, 0.2)),
                        "grad_clip": 0.5 if features["clip"] else 0.0}}
    div = features.get("divergence", "forward_kl")
    if div != "forward_kl":
        config["loss"]["divergence"] = div
    if div == "jsd":
        config["loss"]["beta"] = float(rng.uniform(0.05, 0.95))
    teacher = f32(2 * rng.normal(size=(B, T, V))) if features["teacher"] else None
    case = Case(config, random_tokens(rng, V, B, T),
                random_targets(rng, V, B, T, features["ignore_all"]), teacher,
                random_params(rng, m))
    if teacher is not None and features.get("topk") is not None:
        k = min(V, 1 + int(features["topk"] * V))
        ids, values, lse, rest = teacher_topk(teacher, k, config["loss"]["temperature"])
        # values are teacher logits: float32 already
        case.topk = (ids, values, f32(lse), f32(rest) if features["topk_rest"] else None)
    return case


def random_tokens(rng, V, B, T):
    """Token ids whose first two differ in every row: where a row attends only to
    equal values, the q and k gradients vanish only up to rounding, and their
    relative error means nothing."""
    tokens = rng.integers(0, V, size=(B, T))
    if T > 1:
        tokens[:, 1] = (tokens[:, 0] + rng.integers(1, V, size=B)) % V
    return torch.from_numpy(tokens)


def balanced(rng, n, values):
    """n values cycling through `values`, shuffled: every value occurs when n >= len."""
    picks = [values[i % len(values)] for i in range(n)]
    return [picks[i] for i in rng.permutation(n)]


PLACEMENTS = ["pre", "post", "lns", "sandwich", "deepnorm", "mixln", "hybrid"]


def random_features(rng, n):
    """Features of n cases; one case in ten has every target ignored; the cases
    with a teacher cycle through the divergences; the first case of each placement
    has LayerScale (drawing nothing, so the other cases stay as they were)."""
    columns = {"placement": balanced(rng, n, PLACEMENTS),
               "tied": balanced(rng, n, [True, False]),
               "final_norm": balanced(rng, n, [True, False]),
               "teacher": balanced(rng, n, [True, False]),
               "clip": balanced(rng, n, [True, False]),
               "kv_ratio": balanced(rng, n, [1, 2, 4])}
    features = [dict({k: v[i] for k, v in columns.items()}, ignore_all=i % 10 == 9)
                for i in range(n)]
    teachers = [f for f in features if f["teacher"]]  # every divergence among them
    for f, div in zip(teachers, balanced(rng, len(teachers), ["forward_kl", "reverse_kl", "jsd"])):
        f["divergence"] = div
    for placement in PLACEMENTS:
        first = next((f for f in features if f["placement"] == placement), None)
        if first is not None:
            first["layer_scale"] = True
    return features


def with_topk(rng, features):
    """Gives a third of the cases with a teacher (rounded) a top-k teacher: feature
    topk = f in [0, 1], k = min(V, 1 + floor(f V)); f cycles through 1 (k = V),
    0 (k = 1) and two uniform draws; every second of them also has the cache's log
    mass off the top k (topk_rest), the others Q_rest from 1 - sum_j Q_j. Draws
    only from rng (not the cases' generator), so the rest of every case is as
    without it."""
    teachers = [i for i, f in enumerate(features) if f["teacher"]]
    chosen = [teachers[i] for i in rng.permutation(len(teachers))[:round(len(teachers) / 3)]]
    for n, i in enumerate(chosen):
        features[i]["topk"] = (1.0, 0.0, None, None)[n % 4]
        features[i]["topk_rest"] = n % 2 == 1
        if features[i]["topk"] is None:
            features[i]["topk"] = float(rng.random())
    return features


# ----------------------------------------------------------------------------
# expected outputs
# ----------------------------------------------------------------------------

class Expected:
    """out.* tensors (float64 numpy) plus what the step comparison needs."""

    def __init__(self, tensors, clipped_grads, grad_norm):
        self.tensors, self.clipped_grads, self.grad_norm = tensors, clipped_grads, grad_norm


def loss_and_grads(case, params):
    """(logits, hiddens, (ce, kd, loss), {name: d loss / d param}) with autograd."""
    leaves = {n: p.clone().requires_grad_(True) for n, p in params.items()}
    logits, hiddens = forward(leaves, case.tokens, case.model)
    terms = losses(logits, case.targets, case.teacher, case.config["loss"])
    grads = torch.autograd.grad(terms[2], list(leaves.values()))
    return logits, hiddens, terms, dict(zip(leaves, grads))


def ablation_ce(case):
    with torch.no_grad():
        return [losses(forward(case.params, case.tokens, case.model, skip=i)[0], case.targets,
                       None, case.config["loss"])[0]
                for i in range(case.model["num_hidden_layers"])]


def expected_outputs(case):
    logits, hiddens, (ce, kd, loss), grads = loss_and_grads(case, case.params)
    stepped, clipped, norm = adamw_step(case.params, grads, case.config["optim"])
    out = {"out.logits": logits, "out.ce": ce.reshape(1), "out.kd": kd.reshape(1),
           "out.loss": loss.reshape(1)}
    for l, h in enumerate(hiddens):
        out[f"out.hidden.{l}"] = h
        out[f"out.rms.{l}"] = h.pow(2).mean(-1).sqrt()
    out.update({"out.grad." + n: g for n, g in grads.items()})
    out.update({"out.step." + n: p for n, p in stepped.items()})
    out["out.ablation_ce"] = torch.stack(ablation_ce(case))
    if case.topk is not None:
        kd, loss, grad = topk_terms(logits, case.targets, case.topk, case.config["loss"])
        out.update({"out.topk_kd": kd.reshape(1), "out.topk_loss": loss.reshape(1),
                    "out.topk_dlogits": grad})
    return Expected(to_numpy(out), to_numpy(clipped), norm)


def to_numpy(tensors):
    return {n: t.detach().numpy() for n, t in tensors.items()}


# ----------------------------------------------------------------------------
# comparison
# ----------------------------------------------------------------------------

def family(name):
    prefix = name.split(".")[1]
    return {"ce": "losses", "kd": "losses", "loss": "losses", "topk_kd": "losses",
            "topk_loss": "losses", "topk_dlogits": "grad",
            "ablation_ce": "ablation"}.get(prefix, prefix)


GRAD_FLOOR = 1e-3  # the contract's scale floor for gradients, a fraction of G


def relative_error(got, exp, floor=0.0):
    """max|got - exp| / max(max|exp|, floor) (max|got - exp| when both are 0)."""
    scale = max(np.abs(exp).max(), floor)
    if scale == 0:
        return float(np.abs(got - exp).max())
    return float(np.abs(got - exp).max() / scale)


def grad_scale(arrays):
    """G: the largest max|g| over the given gradient arrays."""
    return max((float(np.abs(a).max()) for a in arrays), default=0.0)


def step_error(got, name, case, expected):
    """max |update difference| / lr over entries whose clipped gradient is not negligible:
    |coef g| > max(1e-3 coef G, 100 eps), G over every gradient of the case."""
    o = case.config["optim"]
    g = np.abs(expected.clipped_grads[name])
    g_clipped = grad_scale(expected.clipped_grads.values())
    significant = g > max(GRAD_FLOOR * g_clipped, 100 * o["eps"])
    if not significant.any():
        return 0.0
    # The updates share the param, so their difference is the difference of the steps.
    diff = np.abs(got - expected.tensors["out.step." + name])
    return float(diff[significant].max() / o["lr"])


def compare(case, expected, got):
    """Returns ({family: worst error}, [problem messages], [(name, error)])."""
    worst = {f: 0.0 for f in FAMILIES}
    problems, per_tensor = [], []
    got = {n: a for n, a in got.items() if n.startswith("out.")}
    g_scale = grad_scale(a for n, a in expected.tensors.items() if n.startswith("out.grad."))
    problems += [f"missing {n}" for n in expected.tensors if n not in got]
    problems += [f"unexpected {n}" for n in got if n not in expected.tensors]
    for name, exp in expected.tensors.items():
        if name not in got:
            continue
        fam, value = family(name), got[name]
        if value.dtype != np.float32 or list(value.shape) != list(exp.shape):
            problems.append(f"{name}: {ST_DTYPE.get(value.dtype, value.dtype)} "
                            f"{list(value.shape)}, expected F32 {list(exp.shape)}")
            worst[fam] = math.inf
            continue
        value = value.astype(np.float64)
        if fam == "step":
            err = step_error(value, name[len("out.step."):], case, expected)
        else:
            floor = GRAD_FLOOR * g_scale if name.startswith("out.grad.") else 0.0
            err = relative_error(value, exp, floor)
        err = math.inf if math.isnan(err) else err
        per_tensor.append((name, err))
        worst[fam] = max(worst[fam], err)
        if err > TOLERANCE[fam]:
            problems.append(f"{name}: error {err:.3g} > {TOLERANCE[fam]:g}")
    return worst, problems, per_tensor


FILE_ERRORS = (OSError, ValueError, KeyError, TypeError, struct.error)  # malformed file


def binary_outputs(binary, case_path, out_path, eval_args=()):
    """Runs golden-eval (with eval_args, e.g. --loss-chunk 1); returns ({name: array},
    None) or (None, error message)."""
    try:
        proc = subprocess.run([str(binary), "golden-eval", str(case_path), str(out_path),
                               *eval_args],
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "golden-eval timed out"
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return None, f"golden-eval exited with status {proc.returncode}: {tail}"
    try:
        return read_safetensors(out_path)[0], None
    except FILE_ERRORS as e:
        return None, f"cannot read the output of golden-eval: {e}"


def check_case(label, case_path, out_path, binary, verbose, eval_args=()):
    """Checks the binary on one case file; prints the result; returns pass/fail."""
    try:
        case = Case.load(case_path)
    except FILE_ERRORS as e:
        print(f"case {label}: cannot load the case: {e} | FAIL")
        return False
    expected = expected_outputs(case)
    clip = case.config["optim"]["grad_clip"]
    clip_text = f"clip{clip:g}/|g|{expected.grad_norm:.3g}" if clip > 0 else "noclip"
    got, error = binary_outputs(binary, case_path, out_path, eval_args)
    if error is None:
        worst, problems, per_tensor = compare(case, expected, got)
        errors = " ".join(f"{f} {worst[f]:.1e}" for f in FAMILIES)
    else:
        problems, per_tensor, errors = [error], [], "-"
    verdict = "FAIL" if problems else "PASS"
    print(f"case {label}: {case.summary()} {clip_text} | {errors} | {verdict}", flush=True)
    if verbose:
        for name, err in per_tensor:
            print(f"    {name} {err:.3e}")
    for problem in problems:
        print(f"    {problem}")
    return not problems


# ----------------------------------------------------------------------------
# self-test (no binary)
# ----------------------------------------------------------------------------

def finite_difference_error(case, rng, probes=4, h=1e-6):
    """Worst |autograd - central difference| / max|grad| over a few entries of each
    param (max over every grad for a param whose grad is all zero)."""
    _, _, _, grads = loss_and_grads(case, case.params)
    overall = max(float(g.abs().max()) for g in grads.values())

    def loss_at(params):
        logits = forward(params, case.tokens, case.model)[0]
        return float(losses(logits, case.targets, case.teacher, case.config["loss"])[2])

    worst = 0.0
    with torch.no_grad():
        for name, g in grads.items():
            for flat in rng.integers(0, g.numel(), size=probes):
                shifted = {}
                for sign in (1, -1):
                    p = dict(case.params)
                    p[name] = case.params[name].clone()
                    p[name].view(-1)[flat] += sign * h
                    shifted[sign] = loss_at(p)
                fd = (shifted[1] - shifted[-1]) / (2 * h)
                scale = float(g.abs().max()) or overall
                worst = max(worst, abs(fd - float(g.view(-1)[flat])) / scale)
    return worst


def functional_loss_error(case):
    """Our (ce, kd) against torch.nn.functional's cross_entropy and kl_div."""
    F = torch.nn.functional
    with torch.no_grad():
        logits = forward(case.params, case.tokens, case.model)[0]
        ce, kd, _ = losses(logits, case.targets, case.teacher, case.config["loss"])
        keep = case.targets != -1
        ref_ce = F.cross_entropy(logits.flatten(0, 1), case.targets.flatten(), ignore_index=-1)
        tau = case.config["loss"]["temperature"]
        log_s = (logits[keep] / tau).log_softmax(-1)
        log_t = (case.teacher[keep] / tau).log_softmax(-1)
        kind = case.config["loss"].get("divergence", "forward_kl")
        if kind == "jsd":  # as TRL's GKD writes it: kl_div against the mixture's log
            beta = case.config["loss"]["beta"]
            log_m = (beta * log_t.exp() + (1 - beta) * log_s.exp()).log()
            ref = (beta * F.kl_div(log_m, log_t, log_target=True, reduction="batchmean") +
                   (1 - beta) * F.kl_div(log_m, log_s, log_target=True, reduction="batchmean"))
        else:
            x, y = (log_s, log_t) if kind == "forward_kl" else (log_t, log_s)
            ref = F.kl_div(x, y, log_target=True, reduction="batchmean")
        ref_kd = tau ** 2 * ref
    return max(abs(float(ce - ref_ce)), abs(float(kd - ref_kd)))


def adamw_error(case):
    """Our AdamW step against torch.optim.AdamW after clip_grad_norm_."""
    expected = expected_outputs(case)
    o = case.config["optim"]
    leaves = {n: p.clone().requires_grad_(True) for n, p in case.params.items()}
    for name, leaf in leaves.items():
        leaf.grad = torch.from_numpy(expected.tensors["out.grad." + name].copy())
    if o["grad_clip"] > 0:
        torch.nn.utils.clip_grad_norm_(list(leaves.values()), o["grad_clip"])
    groups = [{"params": [p for p in leaves.values() if p.dim() >= 2],
               "weight_decay": o["weight_decay"]},
              {"params": [p for p in leaves.values() if p.dim() < 2], "weight_decay": 0.0}]
    torch.optim.AdamW(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"]).step()
    return max(float(np.abs(leaf.detach().numpy() - expected.tensors["out.step." + n]).max())
               for n, leaf in leaves.items()) / o["lr"]


def rotary_error(rng, T=7, hd=10, theta=500.0):
    """Rotate-half RoPE against its complex form: z_j = x_j + i x_(j+hd/2) turns by
    position * theta^(-2j/hd)."""
    x = torch.from_numpy(rng.normal(size=(2, T, 3, hd)))
    half = hd // 2
    z = torch.complex(x[..., :half], x[..., half:])
    angle = torch.arange(T)[:, None] * theta ** (-2.0 * torch.arange(half) / hd)
    turned = z * torch.polar(torch.ones_like(angle), angle)[None, :, None, :]
    return float((rotary(x, theta) - torch.cat([turned.real, turned.imag], -1)).abs().max())


def identity_block_error(case):
    """Pre-norm (lns, sandwich): with o_proj and down_proj zero, block 0 is the
    identity, so its ablation CE equals the full CE."""
    params = dict(case.params)
    for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
        params["model.layers.0." + name] = torch.zeros_like(params["model.layers.0." + name])
    zeroed = Case(case.config, case.tokens, case.targets, None, params)
    with torch.no_grad():
        ce = losses(forward(params, case.tokens, case.model)[0], case.targets, None,
                    case.config["loss"])[0]
    return abs(float(ce) - float(ablation_ce(zeroed)[0]))


def topk_errors(case, rng, probes=6, h=1e-6):
    """The top-k KD from float64 caches of the case's teacher (ids shuffled: any
    order) against the exact KD on the same logits: (|k = V - exact|, the most that
    k in {1, V/2, V-1} exceeds exact (data processing: <= 0), worst |autograd -
    central difference| / max|grad| of d topk_loss / d logits at k = V/2)."""
    loss_cfg, V = case.config["loss"], case.model["vocab_size"]
    tau, alpha = loss_cfg["temperature"], loss_cfg["kd_weight"]
    with torch.no_grad():
        logits = forward(case.params, case.tokens, case.model)[0]
        exact = float(losses(logits, case.targets, case.teacher, loss_cfg)[1])

    def cache(k):
        ids, values, lse, rest = teacher_topk(case.teacher, k, tau)
        order = torch.from_numpy(rng.permutation(k))
        return ids[..., order], values[..., order], lse, rest

    def bucketed(logits, topk):
        return float(topk_kd(logits, case.targets, topk, loss_cfg))

    full = abs(bucketed(logits, cache(V)) - exact)
    excess = max(bucketed(logits, cache(k)) - exact for k in sorted({1, max(1, V // 2), V - 1}))
    topk = cache(max(1, V // 2))
    grad = topk_terms(logits, case.targets, topk, loss_cfg)[2]
    worst = 0.0
    for flat in rng.integers(0, logits.numel(), size=probes):
        shifted = {}
        for sign in (1, -1):
            s = logits.clone()
            s.view(-1)[flat] += sign * h
            ce = float(losses(s, case.targets, None, loss_cfg)[0])
            shifted[sign] = alpha * bucketed(s, topk) + (1 - alpha) * ce
        fd = (shifted[1] - shifted[-1]) / (2 * h)
        worst = max(worst, abs(fd - float(grad.view(-1)[flat])) / float(grad.abs().max()))
    return full, excess, worst


def informative_case(rng, features):
    """A random case with at least 2 blocks and 3 positions, so every weight matters."""
    while True:
        case = random_case(rng, features)
        if case.model["num_hidden_layers"] >= 2 and case.tokens.shape[1] >= 3:
            return case


def self_test(seed):
    rng = np.random.default_rng(seed)
    err = rotary_error(rng)
    ok = err <= 1e-12
    print(f"self-test: rotary vs complex rotation: {err:.2e} {'PASS' if ok else 'FAIL'}")
    placements = ("pre", "post", "lns", "post", "lns", "sandwich", "deepnorm", "mixln",
                  "sandwich", "deepnorm", "mixln", "pre", "post", "lns", "hybrid", "hybrid")
    for i, placement in enumerate(placements):  # the ninth to the fifteenth with LayerScale
        features = {"placement": placement, "tied": i < 2 or i >= 8, "final_norm": i % 3 == 0,
                    "teacher": True, "clip": True, "kv_ratio": 2 ** (i % 3),
                    "ignore_all": False, "layer_scale": 8 <= i < 15,
                    "divergence": ("forward_kl", "reverse_kl", "jsd")[i % 3]}
        case = informative_case(rng, features)
        checks = [("finite differences", finite_difference_error(case, rng), 1e-6),
                  ("losses vs torch.nn.functional", functional_loss_error(case), 1e-12),
                  ("AdamW vs torch.optim.AdamW (units of lr)", adamw_error(case), 1e-9)]
        if block_placement(case.model, 0) in ("pre", "lns", "sandwich"):
            checks.append(("ablation of an identity block", identity_block_error(case), 1e-12))
        full, excess, fd = topk_errors(case, rng)
        checks += [("top-k KD at k = V vs exact KD", full, 1e-12),
                   ("top-k KD at k < V minus exact KD (<= 0)", excess, 1e-12),
                   ("top-k dlogits vs finite differences", fd, 1e-6)]
        for what, err, tol in checks:
            passed = err <= tol
            ok &= passed
            print(f"self-test {case.summary()}: {what}: {err:.2e} "
                  f"{'PASS' if passed else 'FAIL'}")
    return ok


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--cases", type=int, default=12, help="random cases to generate")
    mode.add_argument("--case", nargs="+", metavar="FILE", help="check existing case files")
    mode.add_argument("--self-test", action="store_true", help="check this tool (no binary)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bin", default="build/normgrow",
                    help="normgrow binary, relative to the repository root")
    ap.add_argument("--keep", metavar="DIR", help="keep case and output files in DIR")
    ap.add_argument("--verbose", action="store_true", help="print per-tensor errors")
    ap.add_argument("--eval-args", default="",
                    help="options for golden-eval, e.g. \"--loss-chunk 1 --recompute on\"")
    return ap.parse_args()


def case_files(args, workdir):
    """Yields (label, case path, output path), generating random cases unless --case."""
    if args.case:
        for i, path in enumerate(args.case):
            yield path, Path(path), workdir / f"case{i}.out.safetensors"
        return
    rng = np.random.default_rng(args.seed)
    every = with_topk(np.random.default_rng([args.seed, 1]), random_features(rng, args.cases))
    for i, features in enumerate(every):
        path = workdir / f"case{i}.safetensors"
        random_case(rng, features).save(path)
        yield str(i), path, workdir / f"case{i}.out.safetensors"


def main():
    args = parse_args()
    if args.self_test:
        return 0 if self_test(args.seed) else 1
    binary = REPO / args.bin
    if not binary.is_file():
        print(f"crosscheck: no binary at {binary} (run make)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        results = [check_case(label, path, out, binary, args.verbose, args.eval_args.split())
                   for label, path, out in case_files(args, workdir)]
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
