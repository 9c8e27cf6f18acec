#!/usr/bin/env python3
"""Export a Hugging Face transformer (random weights, built from its configuration) to ONNX with
PyTorch's exporter, with inputs, onnxruntime's outputs and PyTorch's outputs as .npy files.

    python scripts/hf_export.py MODEL OUT_DIR [--batch B] [--seq S] [--layers L] [--hidden H]
        [--heads N] [--kv-heads K] [--vocab V] [--pad P] [--exporter dynamo|torchscript]
        [--opset 18] [--seed 0] [--dtype f32|f16] [--attn eager|sdpa] [--no-optimize]

MODEL is one of
    bert-base   BertModel (BERT-base: hidden 768, 12 layers, 12 heads, vocab 30522);
                inputs input_ids, attention_mask; outputs last_hidden_state, pooler_output
    distilbert  DistilBertModel (dim 768, 6 layers, 12 heads, vocab 30522);
                inputs input_ids, attention_mask; output last_hidden_state
    gpt2        GPT2LMHeadModel (n_embd 768, 12 layers, 12 heads, vocab 50257), use_cache=False;
                inputs input_ids, attention_mask; output logits
    llama       LlamaForCausalLM shaped like SmolLM2-135M (hidden 576, intermediate 1536,
                30 layers, 9 heads, 3 kv heads, vocab 49152, rope_theta 100000, tied
                embeddings), use_cache=False; inputs input_ids, attention_mask; output logits

--layers/--hidden/--heads/--kv-heads/--vocab override the configuration (small test models:
--layers 2 --hidden 64 --heads 4 --vocab 1000). For llama, --hidden also scales the MLP width
(intermediate = hidden * 1536 / 576, rounded to a multiple of 8) unless --intermediate is given,
and --heads without --kv-heads keeps the 3:1 query:kv ratio when it divides evenly.

Writes
    OUT_DIR/model.onnx             static shapes [batch, seq]; weights inline if < 2 GB
    OUT_DIR/inputs/NAME.npy        every graph input, in the dtype the graph declares
    OUT_DIR/expected/NAME.npy      onnxruntime (CPUExecutionProvider) outputs
    OUT_DIR/torch/NAME.npy         PyTorch outputs of the same model on the same inputs

Inputs: input_ids uniform in [0, vocab) from numpy's default_rng(seed); attention_mask is ones
with the last --pad positions of rows 1, 3, 5, ... set to 0 (row 0 is never padded).
Weights: torch.manual_seed(seed) before the model is built; model.eval().

No network access is needed: models are built from their configuration classes only.
"""

import argparse
import os
import sys
import time
import warnings

import numpy as np

MODELS = ("bert-base", "distilbert", "gpt2", "llama")

# ONNX TensorProto element type -> numpy dtype, for the types graph inputs/outputs use here.
ONNX_TO_NP = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=MODELS)
    p.add_argument("out_dir")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int, help="llama only: key/value heads (GQA)")
    p.add_argument("--intermediate", type=int, help="MLP width (default: the model's ratio to hidden)")
    p.add_argument("--vocab", type=int)
    p.add_argument("--pad", type=int, default=0, help="padded positions at the end of odd rows")
    p.add_argument("--exporter", choices=("dynamo", "torchscript"), default="dynamo")
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=("f32", "f16"), default="f32")
    p.add_argument(
        "--attn",
        choices=("eager", "sdpa"),
        default="eager",
        help="attention implementation (eager: explicit MatMul/Softmax; sdpa: "
        "scaled_dot_product_attention, which the exporters decompose)",
    )
    p.add_argument(
        "--no-optimize",
        action="store_true",
        help="dynamo only: skip the exporter's onnxscript optimisation pass (constant folding, "
        "dead-code and identity removal)",
    )
    p.add_argument(
        "--perturb",
        type=float,
        default=0.0,
        metavar="SCALE",
        help="add N(0, SCALE) noise to every parameter whose elements are all equal (the zero "
        "biases and unit norm weights of Hugging Face's initialisation), so that biases and norm "
        "scales are exercised and the exporter's optimiser does not merge identical initializers",
    )
    p.add_argument("--quiet", action="store_true", help="suppress export warnings and progress output")
    args = p.parse_args(argv)
    if args.pad < 0 or args.pad > args.seq:
        p.error("--pad must be in [0, seq]")
    if args.pad >= args.seq and args.batch > 1:
        p.error("--pad must be < seq (a fully padded row gives NaN or arbitrary attention)")
    return args


def build_model(args):
    import torch
    import transformers as tf

    kind = args.model
    if args.kv_heads is not None and kind != "llama":
        sys.exit("--kv-heads applies to llama only")
    # Configurations are built in one call with every override, since some derive fields at
    # construction (LlamaConfig.head_dim = hidden_size // num_attention_heads).
    if kind == "bert-base":
        cls, cfg_cls, kw = tf.BertModel, tf.BertConfig, {}
        keys = dict(layers="num_hidden_layers", hidden="hidden_size", heads="num_attention_heads", vocab="vocab_size")
        if args.hidden is not None or args.intermediate is not None:
            kw["intermediate_size"] = args.intermediate or 4 * (args.hidden or 768)
    elif kind == "distilbert":
        cls, cfg_cls, kw = tf.DistilBertModel, tf.DistilBertConfig, {}
        keys = dict(layers="n_layers", hidden="dim", heads="n_heads", vocab="vocab_size")
        if args.hidden is not None or args.intermediate is not None:
            kw["hidden_dim"] = args.intermediate or 4 * (args.hidden or 768)
    elif kind == "gpt2":
        cls, cfg_cls, kw = tf.GPT2LMHeadModel, tf.GPT2Config, dict(use_cache=False)
        keys = dict(layers="n_layer", hidden="n_embd", heads="n_head", vocab="vocab_size")
        if args.intermediate is not None:
            kw["n_inner"] = args.intermediate
        if args.vocab is not None:  # keep <|endoftext|> inside a smaller vocabulary
            kw["bos_token_id"] = kw["eos_token_id"] = args.vocab - 1
    else:  # llama, SmolLM2-135M shape
        cls, cfg_cls = tf.LlamaForCausalLM, tf.LlamaConfig
        kw = dict(
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            vocab_size=49152,
            max_position_embeddings=8192,
            rope_theta=100000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            hidden_act="silu",
            use_cache=False,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=None,
        )
        keys = dict(layers="num_hidden_layers", hidden="hidden_size", heads="num_attention_heads", vocab="vocab_size")
        if args.intermediate is not None:
            kw["intermediate_size"] = args.intermediate
        elif args.hidden is not None:
            kw["intermediate_size"] = max(8, round(args.hidden * 1536 / 576 / 8) * 8)
        if args.kv_heads is not None:
            kw["num_key_value_heads"] = args.kv_heads
        elif args.heads is not None:
            kw["num_key_value_heads"] = args.heads // 3 if args.heads % 3 == 0 else args.heads
    for arg, key in keys.items():
        v = getattr(args, arg)
        if v is not None:
            kw[key] = v
    if kind == "llama":
        if kw["hidden_size"] % kw["num_attention_heads"]:
            sys.exit("hidden must be a multiple of heads")
        if kw["num_attention_heads"] % kw["num_key_value_heads"]:
            sys.exit("heads must be a multiple of kv-heads")
        kw["head_dim"] = kw["hidden_size"] // kw["num_attention_heads"]
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = args.attn
    torch.manual_seed(args.seed)
    model = cls(cfg)
    # Setting _attn_implementation on the config before construction is not honoured by every
    # version; set it through the public API as well when there is one.
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(args.attn)
    if args.perturb:
        g = torch.Generator().manual_seed(args.seed + 1)
        with torch.no_grad():
            for prm in model.parameters():
                flat = prm.reshape(-1)
                if flat.numel() > 0 and bool((flat == flat[0]).all()):
                    prm.add_(torch.randn(prm.shape, generator=g, dtype=prm.dtype) * args.perturb)
    model.eval()
    if args.dtype == "f16":
        model.half()
    return model, cfg


class Wrapper:
    """Calls the Hugging Face model with (input_ids, attention_mask) and returns a tuple of the
    outputs we export, so the exporters see exactly two inputs and named outputs."""

    @staticmethod
    def make(model, kind):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, input_ids, attention_mask):
                if kind in ("gpt2", "llama"):
                    out = self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True)
                    return (out.logits,)
                out = self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
                if kind == "bert-base":
                    return (out.last_hidden_state, out.pooler_output)
                return (out.last_hidden_state,)

        return W().eval()


def output_names(kind):
    return {
        "bert-base": ["last_hidden_state", "pooler_output"],
        "distilbert": ["last_hidden_state"],
        "gpt2": ["logits"],
        "llama": ["logits"],
    }[kind]


def make_inputs(args, vocab):
    rng = np.random.default_rng(args.seed)
    input_ids = rng.integers(0, vocab, size=(args.batch, args.seq), dtype=np.int64)
    mask = np.ones((args.batch, args.seq), dtype=np.int64)
    if args.pad:
        mask[1::2, args.seq - args.pad :] = 0
    return {"input_ids": input_ids, "attention_mask": mask}


def export(args, wrapper, torch_inputs, path, outs, param_bytes):
    import torch

    in_names = ["input_ids", "attention_mask"]
    big = param_bytes >= 2_000_000_000 - 64_000_000
    t0 = time.time()
    common = dict(opset_version=args.opset, input_names=in_names, output_names=outs)
    inputs = (torch_inputs["input_ids"], torch_inputs["attention_mask"])
    if args.exporter == "dynamo":
        prog = torch.onnx.export(
            wrapper,
            inputs,
            path,
            dynamo=True,
            external_data=big,
            optimize=not args.no_optimize,
            verbose=False if args.quiet else None,
            **common,
        )
        del prog
    else:
        torch.onnx.export(
            wrapper, inputs, path, dynamo=False, do_constant_folding=True, **common
        )
    secs = time.time() - t0
    if not big:
        inline_external_data(path)
    return secs


def inline_external_data(path):
    """Rewrite the model with every initializer inline if any was written as external data."""
    import onnx

    m = onnx.load(path, load_external_data=False)
    locs = set()
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    locs.add(e.value)
    if not locs:
        return
    m = onnx.load(path, load_external_data=True)
    onnx.save_model(m, path, save_as_external_data=False)
    d = os.path.dirname(os.path.abspath(path))
    for loc in locs:
        try:
            os.remove(os.path.join(d, loc))
        except OSError:
            pass


def main(argv=None):
    args = parse_args(argv)
    if args.quiet:
        warnings.filterwarnings("ignore")
    import onnx
    import onnxruntime as ort
    import torch

    torch.set_grad_enabled(False)
    model, cfg = build_model(args)
    wrapper = Wrapper.make(model, args.model)
    vocab = cfg.vocab_size
    np_inputs = make_inputs(args, vocab)
    torch_inputs = {k: torch.from_numpy(v) for k, v in np_inputs.items()}
    outs = output_names(args.model)
    n_params = sum(p.numel() for p in model.parameters())
    param_bytes = n_params * (2 if args.dtype == "f16" else 4)

    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "model.onnx")
    for f in os.listdir(args.out_dir):  # stale external-data files from an earlier run
        if f.startswith("model.onnx") and f != "model.onnx":
            os.remove(os.path.join(args.out_dir, f))

    print(
        f"{args.model}: {cfg.__class__.__name__} {n_params / 1e6:.2f}M params, {args.dtype}, "
        f"attn={args.attn}, exporter={args.exporter}, opset {args.opset}, batch {args.batch}, seq {args.seq}, pad {args.pad}",
        flush=True,
    )
    with torch.no_grad():
        torch_out = [t.detach().cpu().numpy() for t in wrapper(**torch_inputs)]
    secs = export(args, wrapper, torch_inputs, path, outs, param_bytes)
    size = os.path.getsize(path)
    print(f"exported {path} in {secs:.1f} s, {size / 1e6:.1f} MB", flush=True)

    m = onnx.load(path, load_external_data=False)
    graph_inputs = [(i.name, i.type.tensor_type.elem_type) for i in m.graph.input]
    graph_outputs = [o.name for o in m.graph.output]
    del m

    feeds = {}
    for name, et in graph_inputs:
        if name not in np_inputs:
            sys.exit(f"exported graph has an unexpected input {name!r}")
        feeds[name] = np_inputs[name].astype(ONNX_TO_NP[et])
    dropped = sorted(set(np_inputs) - set(feeds))
    if dropped:
        print(f"note: the exported graph does not take {', '.join(dropped)}")

    for sub in ("inputs", "expected", "torch"):
        os.makedirs(os.path.join(args.out_dir, sub), exist_ok=True)
    for name, a in feeds.items():
        np.save(os.path.join(args.out_dir, "inputs", f"{name}.npy"), a)

    if len(graph_outputs) != len(torch_out):
        print(f"warning: graph has {len(graph_outputs)} outputs, torch returned {len(torch_out)}")
    for name, a in zip(graph_outputs, torch_out):
        np.save(os.path.join(args.out_dir, "torch", f"{name}.npy"), a)

    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        ort_out = sess.run(graph_outputs, feeds)
    except Exception as e:  # e.g. an f16 kernel missing on the CPU provider
        print(f"onnxruntime failed: {str(e).splitlines()[0][:300]}")
        ort_out = None

    for i, name in enumerate(graph_outputs):
        t = torch_out[i] if i < len(torch_out) else None
        if ort_out is not None:
            o = ort_out[i]
            np.save(os.path.join(args.out_dir, "expected", f"{name}.npy"), o)
            diff = ""
            if t is not None and t.shape == o.shape:
                d = np.abs(t.astype(np.float64) - o.astype(np.float64))
                diff = f"  max|torch-ort| {np.nanmax(d):.3g}" + ("  (NaN present)" if np.isnan(d).any() else "")
            elif t is not None:
                diff = f"  torch shape {t.shape} differs"
            print(f"{name} {list(o.shape)} {o.dtype}{diff}")
        elif t is not None:
            print(f"{name} {list(t.shape)} {t.dtype}  (torch only; no onnxruntime output)")
    return 0 if ort_out is not None else 1


if __name__ == "__main__":
    sys.exit(main())
