"""A normgrow export loaded by transformers computes normgrow's logits.

Usage: hf_export_check.py BIN EXPORT_DIR WORK_DIR
EXPORT_DIR is a `normgrow export --dtype f32` of a normgrow checkpoint. The
model is loaded with AutoModelForCausalLM.from_pretrained(EXPORT_DIR,
trust_remote_code=True) and run on fixed tokens; the same weights and tokens go
into a golden case that `normgrow golden-eval` evaluates; the two logits must
agree to 1e-4 of their largest magnitude (docs/golden-contract.md's tolerance for logits:
float32 in both, summed in different orders). A custom-architecture export
must also be refused without trust_remote_code (rather than built as some
other model). Prints ok/FAIL lines, or one "skip" line when transformers is
missing.
"""
import json
import subprocess
import sys
from pathlib import Path

try:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
except ImportError as e:
    print(f"skip transformers export check: {e}")
    sys.exit(0)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import numpy as np  # noqa: E402
from crosscheck_torch import Case, read_safetensors, param_shapes  # noqa: E402

TOLERANCE = 1e-4


def normgrow_logits(binary, export_dir, tokens, work):
    """out.logits of golden-eval on a case made of the export's weights and `tokens`."""
    cfg = json.loads((export_dir / "config.json").read_text())
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "rope_theta",
            "rms_norm_eps", "tie_word_embeddings")
    model = {k: cfg[k] for k in keys}
    model["norm_placement"] = cfg.get("norm_placement", "pre")
    model["final_norm"] = cfg.get("final_norm", True)
    for key in ("deepnorm_alpha", "mixln_post_layers", "layer_placements"):  # a placement's own keys
        if key in cfg:
            model[key] = cfg[key]
    weights, _ = read_safetensors(export_dir / "model.safetensors")
    params = {n: torch.from_numpy(weights[n].astype(np.float64)) for n in param_shapes(model)}
    config = {"model": model, "loss": {"kd_weight": 0.5, "temperature": 2.0},
              "optim": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                        "weight_decay": 0.0, "grad_clip": 0.0}}
    case_path, out_path = work / "export_case.safetensors", work / "export_out.safetensors"
    Case(config, tokens, tokens.roll(-1, dims=1), None, params).save(case_path)
    proc = subprocess.run([binary, "golden-eval", str(case_path), str(out_path), "--force"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"golden-eval failed: {proc.stderr.strip()}")
    return torch.from_numpy(read_safetensors(out_path)[0]["out.logits"].astype(np.float64))


def main():
    binary, export_dir, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    cfg = json.loads((export_dir / "config.json").read_text())
    custom = "auto_map" in cfg
    label = f"{cfg.get('norm_placement', 'pre')}-norm export ({cfg['architectures'][0]})"
    if not custom and cfg["model_type"] not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
        print(f"skip {label}: transformers {transformers.__version__} has no {cfg['model_type']}")
        return 0
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, cfg["vocab_size"], (2, 24), generator=gen)
    model = AutoModelForCausalLM.from_pretrained(export_dir, trust_remote_code=custom)  # F32
    model.eval()
    with torch.no_grad():
        got = model(tokens).logits.double()
    want = normgrow_logits(binary, export_dir, tokens, work)
    err = (got - want).abs().max().item()
    rel = err / want.abs().max().item()
    ok = got.shape == want.shape and rel <= TOLERANCE
    print(f"{'ok' if ok else 'FAIL'} {label}: transformers {transformers.__version__} logits vs "
          f"normgrow golden-eval: max abs diff {err:.3g}, {rel:.3g} of max |logit| "
          f"(tolerance {TOLERANCE:g})")
    if custom:
        try:
            AutoModelForCausalLM.from_pretrained(export_dir, trust_remote_code=False)
            print(f"FAIL {label}: loaded without trust_remote_code")
        except Exception as e:  # transformers refuses: the model is not one it knows
            print(f"ok {label}: refused without trust_remote_code ({type(e).__name__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
