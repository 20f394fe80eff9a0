#!/usr/bin/env python3
"""Hugging Face Transformers as the independent reference for trainer's HF import and export.

  hf_reference.py make-llama DIR [--shard-kb N]   random small LlamaForCausalLM (GQA, untied,
                                                   Llama 3.1 RoPE scaling), save_pretrained
  hf_reference.py make-gpt2 DIR                    random small GPT2LMHeadModel (tied, dropout 0.1)
  hf_reference.py make-default KIND DIR            a model saved with transformers' defaults, only the
                                                   shape given: llama, llama31 (rope_scaling llama3,
                                                   eos_token_id a list), gpt2, mistral (sliding_window
                                                   None), mistral-window (its default 4096), qwen2;
                                                   weights perturbed so that every one matters
  hf_reference.py logits DIR TOKENS OUT            logits of Transformers' model for the ids in
                                                   TOKENS (text, one sequence per line) -> OUT (raw float32)
  hf_reference.py loss DIR BIN SEQ WINDOWS         mean next-token loss over the first WINDOWS
                                                   windows of SEQ+1 tokens of a uint16 .bin
  hf_reference.py same-tensors A B                 the safetensors of two model directories hold the
                                                   same names and bits (exit 1 otherwise)
"""
import glob, sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file

torch.manual_seed(0)


def make_llama(out, shard_kb):
    cfg = transformers.LlamaConfig(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16},
        tie_word_embeddings=False, initializer_range=0.1)
    model = transformers.LlamaForCausalLM(cfg)  # initializer_range 0.1: every layer matters to the logits
    model.save_pretrained(out, safe_serialization=True, max_shard_size=f"{shard_kb}KB" if shard_kb else "5GB")


def make_gpt2(out):
    # Dropout 0.1 (GPT-2's own), which inference and evaluation must not apply.
    cfg = transformers.GPT2Config(vocab_size=300, n_embd=64, n_layer=2, n_head=4, n_positions=32,
                                  resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, initializer_range=0.1)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(out, safe_serialization=True)


SHAPE = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)


def make_default(kind, out):
    configs = {
        "llama": lambda: transformers.LlamaConfig(**SHAPE),
        "llama31": lambda: transformers.LlamaConfig(
            **SHAPE, max_position_embeddings=64, eos_token_id=[1, 2], rope_theta=500000.0,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 16}),
        "gpt2": lambda: transformers.GPT2Config(vocab_size=300, n_embd=64, n_layer=2, n_head=4),
        "mistral": lambda: transformers.MistralConfig(**SHAPE, sliding_window=None),
        "mistral-window": lambda: transformers.MistralConfig(**SHAPE),
        "qwen2": lambda: transformers.Qwen2Config(**SHAPE),
    }
    model = transformers.AutoModelForCausalLM.from_config(configs[kind]())
    with torch.no_grad():  # the default init (std 0.02, zero biases) leaves logits nearly flat
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(out, safe_serialization=True)


def load(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def logits(path, tokens, out):
    ids = torch.tensor([[int(t) for t in line.split()] for line in open(tokens) if line.strip()])
    with torch.no_grad():
        load(path)(ids).logits.float().numpy().tofile(out)


def loss(path, binfile, seq, windows):
    seq, windows = int(seq), int(windows)
    stream = np.fromfile(binfile, dtype=np.uint16).astype(np.int64)
    ids = torch.from_numpy(stream[: windows * (seq + 1)]).view(windows, seq + 1)
    model = load(path)
    with torch.no_grad():
        lg = model(ids[:, :-1]).logits
        value = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), ids[:, 1:].reshape(-1))
    print(f"loss {value.item():.9f}")


def tensors(path):
    out = {}
    for f in sorted(glob.glob(path + "/*.safetensors")):
        out.update(load_file(f))
    return out


def same_tensors(a, b):
    ta, tb = tensors(a), tensors(b)
    if sorted(ta) != sorted(tb):
        sys.exit(f"names differ: {sorted(set(ta) ^ set(tb))}")
    for name in ta:
        if not torch.equal(ta[name], tb[name]):
            sys.exit(f"{name} differs: max {(ta[name] - tb[name]).abs().max().item()}")
    print(f"same {len(ta)} tensors")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make-llama":
        make_llama(args[0], int(args[2]) if len(args) > 2 and args[1] == "--shard-kb" else 0)
    elif cmd == "make-gpt2":
        make_gpt2(args[0])
    elif cmd == "make-default":
        make_default(*args)
    elif cmd == "logits":
        logits(*args)
    elif cmd == "loss":
        loss(*args)
    elif cmd == "same-tensors":
        same_tensors(*args)
    else:
        sys.exit(__doc__)
