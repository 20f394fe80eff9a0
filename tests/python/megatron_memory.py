"""Megatron-LM's own theoretical memory report, run outside Megatron.

Usage: megatron_memory.py WHEEL < cases.json > results.json

WHEEL is PyPI's megatron-core wheel (0.19.2 ships megatron/training/theoretical_memory_usage.py).
That file needs only `math` and two helpers from megatron.training.utils, so it is loaded from
the wheel unchanged under a stub package providing those two (no torch, no GPU). Each case is a
dict of Megatron argument names plus "num_microbatches"; the answer per case is
report_theoretical_memory's (weight_and_optimizer, activation) in bytes.
"""
import contextlib
import io
import json
import sys
import tempfile
import types
import zipfile
from pathlib import Path

DEFAULTS = dict(
    kv_channels=None, group_query_attention=False, num_query_groups=None, num_experts=None, swiglu=False,
    moe_shared_expert_intermediate_size=None, moe_latent_size=None, mtp_num_layers=None,
    normalization="LayerNorm", multi_latent_attention=False, untie_embeddings_and_output_weights=False,
    expert_tensor_parallel_size=1, expert_model_parallel_size=1, use_distributed_optimizer=False,
    virtual_pipeline_model_parallel_size=None, sequence_parallel=False, recompute_granularity=None,
    add_bias_linear=True, moe_layer_freq=1, moe_router_topk=2, moe_ffn_hidden_size=None,
    hybrid_override_pattern=None, is_hybrid_model=False,
)


def load(wheel):
    with zipfile.ZipFile(wheel) as z:
        source = z.read("megatron/training/theoretical_memory_usage.py").decode()
    root = Path(tempfile.mkdtemp())
    package = root / "megatron" / "training"
    package.mkdir(parents=True)
    (root / "megatron" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "utils.py").write_text("def is_hybrid_model(args):\n    return False\n\n"
                                      "def print_rank_0(message):\n    pass\n")
    (package / "theoretical_memory_usage.py").write_text(source)
    sys.path.insert(0, str(root))
    from megatron.training import theoretical_memory_usage
    return theoretical_memory_usage


def main():
    module = load(sys.argv[1])
    results = []
    for case in json.load(sys.stdin):
        m = case.pop("num_microbatches")
        args = types.SimpleNamespace(**{**DEFAULTS, **case})
        if args.kv_channels is None:
            args.kv_channels = args.hidden_size // args.num_attention_heads
        with contextlib.redirect_stdout(io.StringIO()):
            weights_mb, activations_mb, _ = module.report_theoretical_memory(args, num_microbatches=m)
        mib = 1024 * 1024
        results.append({"weight_and_optimizer": weights_mb * mib, "activation": activations_mb * mib})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
