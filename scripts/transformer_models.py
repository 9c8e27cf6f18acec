#!/usr/bin/env python3
"""Transformer layers as PyTorch's ONNX exporter writes them, with random weights from a fixed
seed, and their inputs and onnxruntime's outputs, for `ipu run MODEL --input ...`.

    python3 scripts/transformer_models.py bert --seq 128 --out DIR [--dtype f32|f16]
    python3 scripts/transformer_models.py gpt2 --seq 1024 --out DIR [--dtype f32|f16]

writes DIR/model.onnx, DIR/<input>.npy for every graph input and DIR/expected_<output>.npy,
onnxruntime's outputs on the same inputs (for f16 models, onnxruntime's f32 run on the same
f16-rounded weights and inputs, since its CPU kernels lack some f16 operators).

The node patterns follow the exporter's output for Hugging Face's BERT and GPT-2 blocks:
linears as MatMul + Add, heads split with Reshape and Transpose, scores divided by sqrt(d),
an additive attention mask, LayerNormalization, and GELU written out (erf form for BERT,
tanh form with Pow(x, 3) for GPT-2).
"""

import argparse
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    """Collects nodes and initializers with unique names."""

    def __init__(self, dtype, seed):
        self.nodes = []
        self.inits = []
        self.n = 0
        self.np_dtype = np.float16 if dtype == "f16" else np.float32
        self.onnx_dtype = TensorProto.FLOAT16 if dtype == "f16" else TensorProto.FLOAT
        self.rng = np.random.default_rng(seed)
        self.activation_form = None

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, base, array, dtype=None):
        name = self.name(base)
        a = np.asarray(array, dtype=dtype or self.np_dtype)
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def weight(self, base, shape, scale):
        return self.const(base, self.rng.normal(0.0, scale, size=shape))

    def node(self, op, inputs, base=None, **attrs):
        out = self.name(base or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(op), **attrs))
        return out

    def linear(self, x, fan_in, fan_out, base):
        w = self.weight(f"{base}.weight", (fan_in, fan_out), 1.0 / math.sqrt(fan_in))
        b = self.weight(f"{base}.bias", (fan_out,), 0.02)
        return self.node("Add", [self.node("MatMul", [x, w]), b], base)

    def layer_norm(self, x, hidden, base, eps):
        g = self.const(f"{base}.weight", 1.0 + self.rng.normal(0.0, 0.05, size=hidden))
        b = self.weight(f"{base}.bias", (hidden,), 0.05)
        return self.node("LayerNormalization", [x, g, b], base, axis=-1, epsilon=eps)

    def shape(self, dims):
        return self.const("shape", np.array(dims, dtype=np.int64), dtype=np.int64)

    def scalar(self, value):
        return self.const("scalar", np.array(value))

    def attention(self, q, k, v, seq, heads, head_dim, mask):
        """Heads split, scores over sqrt(d), the additive mask, softmax, context merged."""
        split = self.shape([1, seq, heads, head_dim])
        qh = self.node("Transpose", [self.node("Reshape", [q, split])], perm=[0, 2, 1, 3])
        kt = self.node("Transpose", [self.node("Reshape", [k, split])], perm=[0, 2, 3, 1])
        vh = self.node("Transpose", [self.node("Reshape", [v, split])], perm=[0, 2, 1, 3])
        scores = self.node("Div", [self.node("MatMul", [qh, kt]), self.scalar(math.sqrt(head_dim))])
        probs = self.node("Softmax", [self.node("Add", [scores, mask])], axis=-1)
        ctx = self.node("Transpose", [self.node("MatMul", [probs, vh])], perm=[0, 2, 1, 3])
        return self.node("Reshape", [ctx, self.shape([1, seq, heads * head_dim])])

    def activation(self, x, form):
        """GELU in the model's form, or the form `--activation` asks for."""
        form = self.activation_form or form
        if form == "relu":
            return self.node("Relu", [x])
        return self.gelu_erf(x) if form == "erf" else self.gelu_tanh(x)

    def gelu_erf(self, x):
        e = self.node("Erf", [self.node("Div", [x, self.scalar(math.sqrt(2.0))])])
        return self.node("Mul", [self.node("Mul", [x, self.node("Add", [e, self.scalar(1.0)])]), self.scalar(0.5)])

    def gelu_tanh(self, x):
        cube = self.node("Pow", [x, self.scalar(3.0)])
        inner = self.node("Add", [x, self.node("Mul", [cube, self.scalar(0.044715)])])
        t = self.node("Tanh", [self.node("Mul", [inner, self.scalar(math.sqrt(2.0 / math.pi))])])
        half = self.node("Mul", [x, self.scalar(0.5)])
        return self.node("Mul", [half, self.node("Add", [t, self.scalar(1.0)])])


def bert_layer(b, seq, hidden=768, heads=12, ffn=3072):
    """A BERT-base encoder layer (post-LN), inputs `x` [1, seq, hidden] and the additive mask
    `mask` [1, 1, 1, seq]."""
    x, mask = "x", "mask"
    q = b.linear(x, hidden, hidden, "attention.self.query")
    k = b.linear(x, hidden, hidden, "attention.self.key")
    v = b.linear(x, hidden, hidden, "attention.self.value")
    ctx = b.attention(q, k, v, seq, heads, hidden // heads, mask)
    attn = b.linear(ctx, hidden, hidden, "attention.output.dense")
    h = b.layer_norm(b.node("Add", [attn, x]), hidden, "attention.output.LayerNorm", 1e-12)
    f = b.activation(b.linear(h, hidden, ffn, "intermediate.dense"), "erf")
    o = b.linear(f, ffn, hidden, "output.dense")
    y = b.layer_norm(b.node("Add", [o, h]), hidden, "output.LayerNorm", 1e-12)
    inputs = {
        "x": (b.rng.normal(0.0, 1.0, size=(1, seq, hidden)), [1, seq, hidden]),
        # The last eighth of the positions are padding.
        "mask": (np.where(np.arange(seq) < seq - seq // 8, 0.0, -10000.0).reshape(1, 1, 1, seq), [1, 1, 1, seq]),
    }
    return y, inputs


def gpt2_block(b, seq, hidden=768, heads=12):
    """A GPT-2 decoder block (pre-LN) with causal attention: input `x` [1, seq, hidden]; the
    causal mask is an additive constant, as the exporter folds GPT-2's `bias` buffer."""
    x = "x"
    a = b.layer_norm(x, hidden, "ln_1", 1e-5)
    qkv = b.linear(a, hidden, 3 * hidden, "attn.c_attn")
    split = b.const("split", np.array([hidden] * 3, dtype=np.int64), dtype=np.int64)
    q, k, v = (b.name(n) for n in ("q", "k", "v"))
    b.nodes.append(helper.make_node("Split", [qkv, split], [q, k, v], name=b.name("Split"), axis=-1))
    causal = np.triu(np.full((seq, seq), -10000.0), k=1).reshape(1, 1, seq, seq)
    mask = b.const("causal_mask", causal)
    ctx = b.attention(q, k, v, seq, heads, hidden // heads, mask)
    h = b.node("Add", [x, b.linear(ctx, hidden, hidden, "attn.c_proj")])
    m = b.layer_norm(h, hidden, "ln_2", 1e-5)
    f = b.activation(b.linear(m, hidden, 4 * hidden, "mlp.c_fc"), "tanh")
    y = b.node("Add", [h, b.linear(f, 4 * hidden, hidden, "mlp.c_proj")])
    inputs = {"x": (b.rng.normal(0.0, 1.0, size=(1, seq, hidden)), [1, seq, hidden])}
    return y, inputs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["bert", "gpt2"])
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", required=True)
    p.add_argument(
        "--activation",
        choices=["erf", "tanh", "relu"],
        help="the GELU form to write instead of the model's own (relu: not GELU at all)",
    )
    a = p.parse_args()
    b = Builder(a.dtype, a.seed)
    b.activation_form = a.activation
    y, inputs = (bert_layer if a.model == "bert" else gpt2_block)(b, a.seq)
    graph = helper.make_graph(
        b.nodes,
        f"{a.model}_layer",
        [helper.make_tensor_value_info(n, b.onnx_dtype, s) for n, (_, s) in inputs.items()],
        [helper.make_tensor_value_info(y, b.onnx_dtype, [1, a.seq, 768])],
        initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(a.out, exist_ok=True)
    onnx.save(model, os.path.join(a.out, "model.onnx"))
    feeds = {}
    for n, (v, _) in inputs.items():
        arr = np.asarray(v, dtype=b.np_dtype)
        np.save(os.path.join(a.out, f"{n}.npy"), arr)
        feeds[n] = arr
    # onnxruntime on the same model; for f16, its f32 run on the f16-rounded model.
    import onnxruntime as ort

    if a.dtype == "f16":
        from onnx import numpy_helper as nh

        m32 = onnx.load(os.path.join(a.out, "model.onnx"))
        for t in m32.graph.initializer:
            if t.data_type == TensorProto.FLOAT16:
                t.CopyFrom(nh.from_array(nh.to_array(t).astype(np.float32), t.name))
        for vi in list(m32.graph.input) + list(m32.graph.output):
            if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
                vi.type.tensor_type.elem_type = TensorProto.FLOAT
        sess = ort.InferenceSession(m32.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    else:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, feeds)
    np.save(os.path.join(a.out, f"expected_{y}.npy"), out.astype(np.float32))
    print(f"output={y} shape={list(out.shape)} nodes={len(b.nodes)} initializers={len(b.inits)}")


if __name__ == "__main__":
    main()
