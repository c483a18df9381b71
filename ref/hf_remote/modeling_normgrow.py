# A normgrow student as a transformers model: the Qwen3 decoder (GQA attention
# with per-head q/k RMSNorm and rotate-half RoPE, SwiGLU MLP) with the block of
# normgrow's ref/model.c in any of its placements:
#   pre:      a = x + Attn(N_in(x));          y = a + MLP(N_pa(a))
#   post:     a = N_pa(x + Attn(x));          y = N_pf(a + MLP(a))
#   lns:      pre with N_in's and N_pa's outputs divided by sqrt(l), l = layer index + 1
#   sandwich: a = x + N_pa(Attn(N_in(x)));    y = a + N_pf(MLP(N_ff(a)))  (Peri-LN)
#   deepnorm: a = N_pa(alpha x + Attn(x));    y = N_pf(alpha a + MLP(a)), alpha = deepnorm_alpha
#   mixln:    layers l < mixln_post_layers (0-based) post, the others pre
#   hybrid:   layer l pre or post as layer_placements[l] (0-based) says
# and an optional final norm. Tensor names are normgrow's (Hugging Face
# Qwen3's, plus Gemma's pre_feedforward_layernorm and post_feedforward_layernorm). Written beside the weights by
# `normgrow export`; load with
#   AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True).
# It keeps no KV cache: each generation step runs the whole sequence again.
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.generation.utils import GenerationMixin
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_normgrow import NormgrowConfig


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):  # [..., dim], the mean of squares over the last axis
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * x).to(dtype)


def rotary(x, theta):
    """Rotate-half RoPE on x [B, T, heads, hd] at positions 0..T-1."""
    T, hd = x.shape[1], x.shape[-1]
    inv_freq = theta ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64, device=x.device) / hd)
    angle = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * inv_freq[None, :]
    cos = torch.cat([angle.cos(), angle.cos()], -1)[None, :, None, :].to(x.dtype)
    sin = torch.cat([angle.sin(), angle.sin()], -1)[None, :, None, :].to(x.dtype)
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.H, self.KV, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.theta = c.rope_theta
        D = c.hidden_size
        self.q_proj = nn.Linear(D, self.H * self.hd, bias=False)
        self.k_proj = nn.Linear(D, self.KV * self.hd, bias=False)
        self.v_proj = nn.Linear(D, self.KV * self.hd, bias=False)
        self.o_proj = nn.Linear(self.H * self.hd, D, bias=False)
        self.q_norm = RMSNorm(self.hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, c.rms_norm_eps)

    def forward(self, x, keep):  # x [B, T, D]; keep [B, 1, T, T] True where attended
        B, T, _ = x.shape
        q = rotary(self.q_norm(self.q_proj(x).view(B, T, self.H, self.hd)), self.theta)
        k = rotary(self.k_norm(self.k_proj(x).view(B, T, self.KV, self.hd)), self.theta)
        v = self.v_proj(x).view(B, T, self.KV, self.hd)
        kv_of_head = torch.arange(self.H, device=x.device) // (self.H // self.KV)
        q = q.transpose(1, 2)                                  # [B, H, T, hd]
        k = k[:, :, kv_of_head].transpose(1, 2)
        v = v[:, :, kv_of_head].transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(self.hd)  # [B, H, T, T]
        probs = scores.masked_fill(~keep, float("-inf")).softmax(-1).to(v.dtype)
        heads = (probs @ v).transpose(1, 2).reshape(B, T, self.H * self.hd)
        return self.o_proj(heads)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def block_placement(c, layer):
    """The placement layer `layer` (0-based) computes: mixln's and hybrid's are post or pre."""
    if c.norm_placement == "mixln":
        return "post" if layer < c.mixln_post_layers else "pre"
    if c.norm_placement == "hybrid":
        return c.layer_placements[layer]
    return c.norm_placement


class Block(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.placement = block_placement(c, layer)
        self.scale = 1 / math.sqrt(layer + 1) if self.placement == "lns" else 1.0
        self.alpha = c.deepnorm_alpha if self.placement == "deepnorm" else 1.0
        eps = c.rms_norm_eps
        if self.placement in ("pre", "lns", "sandwich"):
            self.input_layernorm = RMSNorm(c.hidden_size, eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, eps)
        if self.placement == "sandwich":
            self.pre_feedforward_layernorm = RMSNorm(c.hidden_size, eps)
        if self.placement in ("post", "deepnorm", "sandwich"):
            self.post_feedforward_layernorm = RMSNorm(c.hidden_size, eps)
        self.mlp = MLP(c)

    def forward(self, x, keep):
        if self.placement in ("pre", "lns"):
            a = x + self.self_attn(self.scale * self.input_layernorm(x), keep)
            return a + self.mlp(self.scale * self.post_attention_layernorm(a))
        if self.placement == "sandwich":
            a = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), keep))
            return a + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(a)))
        a = self.post_attention_layernorm(self.alpha * x + self.self_attn(x, keep))
        return self.post_feedforward_layernorm(self.alpha * a + self.mlp(a))


class NormgrowPreTrainedModel(PreTrainedModel):
    config_class = NormgrowConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, 0.02)


class NormgrowModel(NormgrowPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_hidden_layers))
        if config.final_norm:
            self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def forward(self, input_ids, attention_mask=None):
        B, T = input_ids.shape
        keep = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()[None, None]
        if attention_mask is not None:  # [B, T], 0 at padding keys
            keep = keep & attention_mask.bool()[:, None, None, :]
            keep = keep | torch.eye(T, dtype=torch.bool, device=input_ids.device)  # no empty rows
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, keep)
        return self.norm(h) if self.config.final_norm else h


class NormgrowForCausalLM(NormgrowPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}  # with tie_word_embeddings

    def __init__(self, config):
        super().__init__(config)
        self.model = NormgrowModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids=None, attention_mask=None, labels=None, return_dict=None, **kwargs):
        logits = self.lm_head(self.model(input_ids, attention_mask)).float()
        loss = None
        if labels is not None:  # next-token CE, as transformers' causal LMs
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)
