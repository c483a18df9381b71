# The configuration of a normgrow student exported by `normgrow export`: a
# Qwen3 decoder whose blocks have one of normgrow's norm placements (pre, post,
# lns, sandwich, deepnorm with deepnorm_alpha, mixln with mixln_post_layers,
# hybrid with layer_placements: each layer's "pre" or "post") and
# whose final norm may be absent. Written beside the weights; transformers loads it with
# AutoConfig.from_pretrained(dir, trust_remote_code=True).
from transformers import PretrainedConfig


class NormgrowConfig(PretrainedConfig):
    model_type = "normgrow"

    def __init__(self, vocab_size=257, hidden_size=128, intermediate_size=512,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=32, rope_theta=10000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=False, norm_placement="pre", final_norm=True,
                 deepnorm_alpha=None, mixln_post_layers=None, layer_placements=None, **kwargs):
        placements = ("pre", "post", "lns", "sandwich", "deepnorm", "mixln", "hybrid")
        if norm_placement not in placements:
            raise ValueError(f"norm_placement: {norm_placement!r} is none of {placements}")
        if norm_placement == "deepnorm" and not (deepnorm_alpha is not None and deepnorm_alpha > 0):
            raise ValueError(f"deepnorm_alpha: {deepnorm_alpha!r} is not a number > 0")
        if norm_placement == "mixln" and not (
                mixln_post_layers is not None and 0 <= mixln_post_layers <= num_hidden_layers):
            raise ValueError(f"mixln_post_layers: {mixln_post_layers!r} is outside "
                             f"0..num_hidden_layers ({num_hidden_layers})")
        if norm_placement == "hybrid" and not (
                isinstance(layer_placements, (list, tuple)) and len(layer_placements) == num_hidden_layers
                and all(p in ("pre", "post") for p in layer_placements)):
            raise ValueError(f"layer_placements: {layer_placements!r} is not one \"pre\" or \"post\" "
                             f"per layer ({num_hidden_layers})")
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.rope_theta = rope_theta
        self.rms_norm_eps = rms_norm_eps
        self.norm_placement = norm_placement
        self.final_norm = final_norm
        if norm_placement == "deepnorm":
            self.deepnorm_alpha = deepnorm_alpha
        if norm_placement == "mixln":
            self.mixln_post_layers = mixln_post_layers
        if norm_placement == "hybrid":
            self.layer_placements = list(layer_placements)
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
