#!/usr/bin/env python3
"""Writes the golden fixtures that glint's tests compare with, from transformers and PEFT.

For a tiny Qwen3-MoE and a tiny Qwen3 (dense), in float32, one fixed batch:
  NAME/model/            config.json + model.safetensors (transformers' save_pretrained)
  NAME/golden.safetensors
      input_ids [B,S], labels [B,S] (-100 where nothing is trained),
      logits [B,S,V], loss [] (transformers' mean over label tokens),
      grad.<parameter name> for every parameter (d loss / d parameter),
      adapter_logits [B,S,V] (the model with the PEFT adapter below)
  NAME/adapter/          a PEFT-written LoRA adapter: attention target_modules and, for
                         the MoE model, the packed experts as target_parameters, with
                         random (non-zero) B so that it changes the logits
  NAME/versions.json     torch, transformers and peft versions that wrote them

Regenerating needs torch, transformers (v5: packed experts) and peft; reading them
(the C++ tests) does not. Run from the repository root:

    python3 tests/golden/make_golden.py [--out tests/golden]
"""
import argparse
import json
import os

import torch

MOE = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "attention_bias": False, "initializer_range": 0.1,
    "output_router_logits": False, "router_aux_loss_coef": 0.0,
}
DENSE = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "attention_bias": False, "initializer_range": 0.1,
}
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]


def batch(vocab):
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, vocab, (2, 12), generator=g)
    labels = ids.clone()
    labels[0, :4] = -100  # a prompt: not trained
    labels[1, 9:] = -100  # padding at the end
    return ids, labels


def write(name, cfg_dict, out):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**cfg_dict)
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    # Norm weights away from 1 so that they matter to the gradients.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model.eval()
    model.save_pretrained(os.path.join(d, "model"), safe_serialization=True)

    ids, labels = batch(cfg.vocab_size)
    out_ = model(input_ids=ids, labels=labels)
    out_.loss.backward()
    tensors = {"input_ids": ids, "labels": labels, "logits": out_.logits.detach().contiguous(),
               "loss": out_.loss.detach().reshape([])}
    for n, p in model.named_parameters():
        tensors["grad." + n] = p.grad.detach().contiguous()
    model.zero_grad(set_to_none=True)

    lora = {"r": 4, "lora_alpha": 8, "target_modules": ATTENTION, "init_lora_weights": False,
            "task_type": "CAUSAL_LM"}
    if cfg_dict["model_type"] == "qwen3_moe":
        lora["target_parameters"] = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    peft_model = get_peft_model(model, LoraConfig(**lora))
    with torch.no_grad():
        tensors["adapter_logits"] = peft_model(input_ids=ids).logits.detach().contiguous()
    peft_model.save_pretrained(os.path.join(d, "adapter"))
    save_file(tensors, os.path.join(d, "golden.safetensors"))
    import peft
    with open(os.path.join(d, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "peft": peft.__version__}, f, indent=1)
    print(f"{name}: loss {out_.loss.item():.6f}, {len(tensors)} tensors in {d}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__))))
    a = ap.parse_args()
    write("qwen3_moe", MOE, a.out)
    write("qwen3", DENSE, a.out)


if __name__ == "__main__":
    main()
