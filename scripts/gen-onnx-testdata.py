#!/usr/bin/env python3
"""Writes the small ONNX models and expected outputs that crates/ipu-onnx/tests use.

Each model is built with onnx.helper and checked with onnx.checker; the expected outputs are
computed here with NumPy in float64 (independently of any ONNX runtime) and written, with the
inputs, in the ONNX test-data form: DIR/NAME.onnx and DIR/NAME/{input,output}_K.pb
(serialised TensorProtos). Run it in a venv with the pinned onnx:

    python3 -m venv target/onnx-venv
    target/onnx-venv/bin/pip install onnx==1.23.2 numpy
    target/onnx-venv/bin/python scripts/gen-onnx-testdata.py

The outputs are committed, so `cargo test` needs no Python.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "ipu-onnx", "tests", "data")
RNG = np.random.default_rng(20240601)
F = TensorProto.FLOAT


def model(name, nodes, inputs, outputs, initializers=(), opset=17, check=True):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_operatorsetid("", opset)],
        producer_name="ipu-stack scripts/gen-onnx-testdata.py",
    )
    # Pin the IR version so the bytes do not depend on the onnx package's default (IR 11
    # brought opset 23).
    m.ir_version = 11 if opset >= 23 else 10
    if check:
        onnx.checker.check_model(m, full_check=True)
    return m


def save(m, name, inputs=(), outputs=()):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())
    if inputs or outputs:
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        for k, (n, a) in enumerate(inputs):
            with open(os.path.join(d, f"input_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(a, n).SerializeToString())
        for k, (n, a) in enumerate(outputs):
            with open(os.path.join(d, f"output_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(a, n).SerializeToString())


def f32(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def d(a):
    return a.astype(np.float64)


def linear():
    """MatMul + Add with initializers (raw_data), the shape of an exporter's linear layer."""
    w, b = f32((4, 3)), f32((3,))
    x = f32((2, 4))
    m = model(
        "linear",
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"], name="linear/MatMul"),
            helper.make_node("Add", ["xw", "b"], ["y"], name="linear/Add"),
        ],
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    y = d(x) @ d(w) + d(b)
    save(m, "linear", [("x", x)], [("y", y.astype(np.float32))])


def linear_external():
    """The linear layer with its weight in an external-data file."""
    w, b = f32((4, 3)), f32((3,))
    x = f32((2, 4))
    m = model(
        "linear_external",
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    # The weight goes to linear_external.data at an offset after the bias.
    data = b.tobytes() + w.tobytes()
    with open(os.path.join(OUT, "linear_external.data"), "wb") as f:
        f.write(data)
    for t, offset, n in ((m.graph.initializer[0], len(b.tobytes()), w.nbytes), (m.graph.initializer[1], 0, b.nbytes)):
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "linear_external.data"), ("offset", str(offset)), ("length", str(n))):
            e = t.external_data.add()
            e.key, e.value = k, v
    y = d(x) @ d(w) + d(b)
    save(m, "linear_external", [("x", x)], [("y", y.astype(np.float32))])


def gemm_trans_b():
    """Gemm with transB, alpha and beta, its weight in float_data (not raw)."""
    a, w, c = f32((3, 5)), f32((4, 5)), f32((4,))
    wt = helper.make_tensor("w", F, [4, 5], w.flatten().tolist())
    m = model(
        "gemm",
        [helper.make_node("Gemm", ["a", "w", "c"], ["y"], name="fc", transB=1, alpha=0.5, beta=2.0)],
        [helper.make_tensor_value_info("a", F, [3, 5])],
        [helper.make_tensor_value_info("y", F, [3, 4])],
        [wt, numpy_helper.from_array(c, "c")],
    )
    y = 0.5 * (d(a) @ d(w).T) + 2.0 * d(c)
    save(m, "gemm_trans_b", [("a", a)], [("y", y.astype(np.float32))])


def head_split():
    """Attention's head split as exporters write it: the target shape of the Reshape comes
    from Shape -> Gather -> Unsqueeze -> Concat; batch and sequence are symbolic."""
    heads, head_dim = 2, 4
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], name="shape"),
        helper.make_node("Constant", [], ["i0"], value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Constant", [], ["i1"], value=numpy_helper.from_array(np.array(1, np.int64))),
        helper.make_node("Gather", ["x_shape", "i0"], ["batch"], name="gather_batch", axis=0),
        helper.make_node("Gather", ["x_shape", "i1"], ["seq"], name="gather_seq", axis=0),
        helper.make_node("Constant", [], ["axes0"], value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Unsqueeze", ["seq", "axes0"], ["seq1"]),
        helper.make_node(
            "Constant", [], ["tail"], value=helper.make_tensor("tail", TensorProto.INT64, [2], [heads, head_dim])
        ),
        helper.make_node("Concat", ["batch1", "seq1", "tail"], ["target"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["heads"], name="split_heads"),
        helper.make_node("Transpose", ["heads"], ["y"], name="to_heads", perm=[0, 2, 1, 3]),
    ]
    m = model(
        "head_split",
        nodes,
        [helper.make_tensor_value_info("x", F, ["batch", "seq", heads * head_dim])],
        [helper.make_tensor_value_info("y", F, ["batch", heads, "seq", head_dim])],
    )
    x = f32((2, 3, heads * head_dim))
    y = x.reshape(2, 3, heads, head_dim).transpose(0, 2, 1, 3)
    save(m, "head_split", [("x", x)], [("y", y)])


def softmax():
    """Scaled scores and softmax along the last axis; the division by a power of two is
    exact as a scale."""
    x = f32((3, 5), 3.0)
    m = model(
        "softmax",
        [
            helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, np.float32))),
            helper.make_node("Div", ["x", "two"], ["scaled"]),
            helper.make_node("Softmax", ["scaled"], ["y"], axis=-1),
        ],
        [helper.make_tensor_value_info("x", F, [3, 5])],
        [helper.make_tensor_value_info("y", F, [3, 5])],
        opset=13,
    )
    s = d(x) / 2.0
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    y = e / e.sum(axis=-1, keepdims=True)
    save(m, "softmax", [("x", x)], [("y", y.astype(np.float32))])


def layer_norm():
    """LayerNormalization (opset 17) with scale and bias."""
    x, g, b = f32((4, 8), 2.0), f32((8,)), f32((8,))
    m = model(
        "layer_norm",
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5)],
        [helper.make_tensor_value_info("x", F, [4, 8])],
        [helper.make_tensor_value_info("y", F, [4, 8])],
        [numpy_helper.from_array(g, "g"), numpy_helper.from_array(b, "b")],
    )
    xd = d(x)
    mean = xd.mean(axis=-1, keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (xd - mean) / np.sqrt(var + 1e-5) * d(g) + d(b)
    save(m, "layer_norm", [("x", x)], [("y", y.astype(np.float32))])


def mix():
    """Many small operators in one graph: Slice, Split, Concat, Squeeze/Unsqueeze, ReduceMean
    (keepdims 0), ReduceMax, Sub, Mul by a scalar, Neg, Relu, Flatten, Identity, Dropout,
    Expand, Gather, Pow 2, Max, Min; int64 shapes in int64_data."""
    x = f32((2, 6, 4))
    shift = f32((4,))
    i64 = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [len(v)], v)
    inits = [
        numpy_helper.from_array(shift, "shift"),
        i64("starts", [1]),
        i64("ends", [5]),
        i64("axes1", [1]),
        i64("split", [2, 2]),
        i64("expand_to", [2, 3, 4]),
        i64("flat_shape", [2, -1]),
        helper.make_tensor("idx", TensorProto.INT64, [2], [3, 0]),
    ]
    nodes = [
        helper.make_node("Slice", ["x", "starts", "ends", "axes1"], ["s"]),  # [2, 4, 4]
        helper.make_node("Split", ["s", "split"], ["s0", "s1"], axis=1),  # [2, 2, 4] each
        helper.make_node("Sub", ["s0", "s1"], ["diff"]),
        helper.make_node("Constant", [], ["c3"], value=numpy_helper.from_array(np.array([3.0], np.float32))),
        helper.make_node("Mul", ["diff", "c3"], ["tripled"]),
        helper.make_node("Relu", ["tripled"], ["relu"]),
        helper.make_node("ReduceMean", ["relu"], ["mean"], axes=[1], keepdims=0),  # [2, 4]
        helper.make_node("ReduceMax", ["s1"], ["peak"], axes=[1, 2], keepdims=1),  # [2, 1, 1]
        helper.make_node("Add", ["mean", "shift"], ["shifted"]),
        helper.make_node("Unsqueeze", ["shifted", "axes1"], ["row"]),  # [2, 1, 4]
        helper.make_node("Expand", ["row", "expand_to"], ["rows"]),  # [2, 3, 4]
        helper.make_node("Neg", ["peak"], ["neg_peak"]),
        helper.make_node("Concat", ["rows", "s0"], ["joined"], axis=1),  # [2, 5, 4]
        helper.make_node("Sub", ["joined", "neg_peak"], ["lifted"]),
        helper.make_node("Gather", ["lifted", "idx"], ["picked"], axis=1),  # [2, 2, 4]
        helper.make_node("Pow", ["picked", "two"], ["squared"]),
        helper.make_node("Max", ["squared", "picked"], ["bigger"]),
        helper.make_node("Min", ["bigger", "four"], ["capped"]),
        helper.make_node("Identity", ["capped"], ["same"]),
        helper.make_node("Dropout", ["same"], ["kept"]),
        helper.make_node("Flatten", ["kept"], ["flat"], axis=1),  # [2, 8]
        helper.make_node("Reshape", ["flat", "flat_shape"], ["y"]),
        helper.make_node("Squeeze", ["peak"], ["peak_flat"]),  # [2]
    ]
    inits += [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array([4.0], np.float32), "four"),
    ]
    m = model(
        "mix",
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 6, 4])],
        [helper.make_tensor_value_info("y", F, [2, 8]), helper.make_tensor_value_info("peak_flat", F, [2])],
        inits,
        opset=17,
    )
    s = x[:, 1:5, :]
    s0, s1 = s[:, 0:2], s[:, 2:4]
    relu = np.maximum((d(s0) - d(s1)) * 3.0, 0.0)
    mean = relu.mean(axis=1)
    peak = d(s1).max(axis=(1, 2), keepdims=True)
    shifted = mean + d(shift)
    rows = np.broadcast_to(shifted[:, None, :], (2, 3, 4))
    joined = np.concatenate([rows, d(s0)], axis=1)
    lifted = joined + peak
    picked = lifted[:, [3, 0], :]
    capped = np.minimum(np.maximum(picked * picked, picked), 4.0)
    y = capped.reshape(2, -1)
    save(m, "mix", [("x", x)], [("y", y.astype(np.float32)), ("peak_flat", peak.reshape(2).astype(np.float32))])


def folding():
    """The folding evaluator and opset-18 forms: Shape with start, Gather, Slice, Concat,
    Cast, integer Mul, Sqrt and Div of constants (a scale), Range, Less, Where (an additive
    mask), ConstantOfShape, ReduceSum and ReduceMax with axes as inputs, Softmax on a middle
    axis, Split by num_outputs, Unsqueeze with a negative axis, Squeeze without axes and
    Flatten at axis 0."""
    x = f32((2, 3, 4))
    i64 = lambda v: numpy_helper.from_array(np.array(v, np.int64))
    c = lambda out, value: helper.make_node("Constant", [], [out], value=value)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Shape", ["x"], ["tail"], start=-2),
        c("one_i", i64(1)),
        c("two_i", i64(2)),
        helper.make_node("Gather", ["shape", "one_i"], ["d1"]),
        helper.make_node("Gather", ["tail", "one_i"], ["d2"]),
        helper.make_node("Mul", ["d1", "d2"], ["n"]),
        helper.make_node("Cast", ["n"], ["nf"], to=F),
        helper.make_node("Sqrt", ["nf"], ["root"]),
        c("one_f", numpy_helper.from_array(np.array(1.0, np.float32))),
        helper.make_node("Div", ["one_f", "root"], ["inv_root"]),
        c("s0", i64([0])),
        c("s1", i64([1])),
        c("minus1", i64([-1])),
        helper.make_node("Slice", ["shape", "s0", "s1"], ["batch"]),
        helper.make_node("Concat", ["batch", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["rows"]),  # [2, 12]
        helper.make_node("Mul", ["rows", "inv_root"], ["scaled"]),
        c("start", i64(0)),
        c("limit", i64(12)),
        helper.make_node("Range", ["start", "limit", "one_i"], ["positions"]),
        c("six", i64(6)),
        helper.make_node("Less", ["positions", "six"], ["keep"]),
        c("zero_f", numpy_helper.from_array(np.array(0.0, np.float32))),
        c("big_neg", numpy_helper.from_array(np.array(-10000.0, np.float32))),
        helper.make_node("Where", ["keep", "zero_f", "big_neg"], ["mask"]),
        helper.make_node("Add", ["scaled", "mask"], ["masked"]),
        helper.make_node("Concat", ["batch", "s1"], ["ones_shape"], axis=0),
        helper.make_node(
            "ConstantOfShape", ["ones_shape"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32))
        ),
        helper.make_node("Add", ["masked", "ones"], ["lifted"]),
        helper.make_node("ReduceSum", ["lifted", "minus1"], ["summed"], keepdims=0),  # [2]
        helper.make_node("ReduceMax", ["x", "s1"], ["peak"], keepdims=1),  # [2, 1, 4]
        helper.make_node("Softmax", ["x"], ["soft"], axis=1),
        helper.make_node("Split", ["x"], ["p0", "p1"], axis=2, num_outputs=2),
        helper.make_node("Sub", ["p0", "p1"], ["half_diff"]),
        helper.make_node("Unsqueeze", ["half_diff", "minus1"], ["tall"]),
        helper.make_node("Squeeze", ["tall"], ["flat_again"]),
        helper.make_node("Flatten", ["flat_again"], ["flat0"], axis=0),  # [1, 12]
    ]
    m = model(
        "folding",
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 3, 4])],
        [
            helper.make_tensor_value_info("summed", F, [2]),
            helper.make_tensor_value_info("peak", F, [2, 1, 4]),
            helper.make_tensor_value_info("soft", F, [2, 3, 4]),
            helper.make_tensor_value_info("flat0", F, [1, 12]),
        ],
        opset=18,
    )
    xd = d(x)
    inv_root = np.float32(1.0) / np.sqrt(np.float32(12.0))  # folded in float32, as ONNX
    mask = np.where(np.arange(12) < 6, 0.0, -10000.0)
    summed = (xd.reshape(2, 12) * np.float64(inv_root) + mask + 1.0).sum(axis=-1)
    peak = xd.max(axis=1, keepdims=True)
    e = np.exp(xd - xd.max(axis=1, keepdims=True))
    soft = e / e.sum(axis=1, keepdims=True)
    flat0 = (xd[:, :, :2] - xd[:, :, 2:]).reshape(1, 12)
    outs = [("summed", summed), ("peak", peak), ("soft", soft), ("flat0", flat0)]
    save(m, "folding", [("x", x)], [(n, a.astype(np.float32)) for n, a in outs])


def sdpa(q, k, v, scale, causal):
    """Scaled dot-product attention in float64, [.., heads, seq, head] operands."""
    s = (d(q) @ np.swapaxes(d(k), -1, -2)) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ d(v)


def attention():
    """Attention (opset 23): 4-D causal with the default scale, and 3-D grouped-query
    attention (4 q heads on 2 kv heads) with an explicit scale and a longer key sequence."""
    q, k, v = f32((1, 2, 4, 8)), f32((1, 2, 4, 8)), f32((1, 2, 4, 8))
    m = model(
        "attention_causal",
        [helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn", is_causal=1)],
        [helper.make_tensor_value_info(n, F, [1, 2, 4, 8]) for n in "qkv"],
        [helper.make_tensor_value_info("y", F, [1, 2, 4, 8])],
        opset=23,
    )
    y = sdpa(q, k, v, 1 / np.sqrt(8), True)
    save(m, "attention_causal", [("q", q), ("k", k), ("v", v)], [("y", y.astype(np.float32))])

    batch, sq, skv, hq, hkv, head = 2, 3, 5, 4, 2, 4
    q, k, v = f32((batch, sq, hq * head)), f32((batch, skv, hkv * head)), f32((batch, skv, hkv * head))
    m = model(
        "attention_gqa",
        [
            helper.make_node(
                "Attention", ["q", "k", "v"], ["y"], name="gqa", q_num_heads=hq, kv_num_heads=hkv, scale=0.3
            )
        ],
        [
            helper.make_tensor_value_info("q", F, list(q.shape)),
            helper.make_tensor_value_info("k", F, list(k.shape)),
            helper.make_tensor_value_info("v", F, list(v.shape)),
        ],
        [helper.make_tensor_value_info("y", F, [batch, sq, hq * head])],
        opset=23,
    )
    to_heads = lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).transpose(0, 2, 1, 3)
    k4 = np.repeat(to_heads(k, hkv), hq // hkv, axis=1)
    v4 = np.repeat(to_heads(v, hkv), hq // hkv, axis=1)
    y = sdpa(to_heads(q, hq), k4, v4, 0.3, False).transpose(0, 2, 1, 3).reshape(batch, sq, hq * head)
    save(m, "attention_gqa", [("q", q), ("k", k), ("v", v)], [("y", y.astype(np.float32))])


def f16():
    """f16 arithmetic with an f16 initializer stored in int32_data (its bits); the expected
    output is NumPy's float16 sum (computed in float32, rounded once)."""
    x = f32((2, 4)).astype(np.float16)
    half = np.array([0.5, -1.25, 2.0, 0.0], np.float16)
    t = helper.make_tensor("half", TensorProto.FLOAT16, [4], half.astype(np.float32).tolist())
    assert len(t.int32_data) == 4 and not t.raw_data
    H = TensorProto.FLOAT16
    m = model(
        "f16",
        [helper.make_node("Add", ["x", "half"], ["y"])],
        [helper.make_tensor_value_info("x", H, [2, 4])],
        [helper.make_tensor_value_info("y", H, [2, 4])],
        [t],
    )
    save(m, "f16", [("x", x)], [("y", x + half)])


def fp8():
    """FP8 FNUZ: the input cast to FLOAT8E4M3FNUZ and on to FLOAT8E5M2FNUZ; a second output
    is an initializer of FLOAT8E4M3FNUZ codes (raw_data), which must keep its codes."""
    codes = np.array([0x00, 0x01, 0x38, 0x40, 0x7F, 0xB8, 0xC0, 0xFF], np.uint8)
    t = helper.make_tensor("w8", TensorProto.FLOAT8E4M3FNUZ, [8], codes.tobytes(), raw=True)
    E4, E5 = TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2FNUZ
    m = model(
        "fp8",
        [
            helper.make_node("Cast", ["x"], ["x8"], to=E4),
            helper.make_node("Cast", ["x8"], ["y"], to=E5),
            helper.make_node("Identity", ["w8"], ["w"]),
        ],
        [helper.make_tensor_value_info("x", F, [8])],
        [helper.make_tensor_value_info("y", E5, [8]), helper.make_tensor_value_info("w", E4, [8])],
        [t],
        opset=19,
    )
    save(m, "fp8")


def errors():
    """Models the importer must refuse, each for one reason."""
    x = helper.make_tensor_value_info("x", F, [2, 3])
    y = helper.make_tensor_value_info("y", F, [2, 3])
    # An operator no one knows, in the default domain (not checkable by onnx.checker).
    save(model("unknown_op", [helper.make_node("FancyOp", ["x"], ["y"], name="mystery")], [x], [y], check=False), "unknown_op")
    # A known operator with no device counterpart.
    save(model("floor", [helper.make_node("Floor", ["x"], ["y"], name="activation")], [x], [y]), "floor")
    # An opset newer than the importer supports.
    save(
        model("opset_new", [helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y], opset=29, check=False),
        "opset_too_new",
    )


def activations():
    """Sqrt, Tanh, Erf, Pow (exponents 0.5 and 3) and both Gelu forms (opset 20), and the
    erf-GELU pattern exporters write (Div by sqrt(2), Erf, Add 1, Mul, Mul 0.5); expected
    outputs in float64 (math.erf for erf)."""
    import math

    erf = np.vectorize(math.erf)
    shape = [3, 7]
    x = f32(shape, 2.0)
    x[0, :4] = [0.0, 1e-6, -1e-6, 0.25]
    pos = np.abs(x) + np.float32(0.01)
    io = lambda n: helper.make_tensor_value_info(n, F, shape)
    for name, op, arg, y in [
        ("sqrt", "Sqrt", pos, np.sqrt(d(pos))),
        ("tanh", "Tanh", x, np.tanh(d(x))),
        ("erf", "Erf", x, erf(d(x))),
    ]:
        m = model(name, [helper.make_node(op, ["x"], ["y"], name=name)], [io("x")], [io("y")])
        save(m, name, [("x", arg)], [("y", y.astype(np.float32))])
    # Pow with known exponents: sqrt and a cube.
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    three = numpy_helper.from_array(np.array(3.0, np.float32), "three")
    m = model(
        "pow",
        [
            helper.make_node("Pow", ["p", "half"], ["root"], name="pow_half"),
            helper.make_node("Pow", ["x", "three"], ["cube"], name="pow_three"),
        ],
        [io("p"), io("x")],
        [io("root"), io("cube")],
        [half, three],
    )
    save(m, "pow", [("p", pos), ("x", x)], [("root", np.sqrt(d(pos)).astype(np.float32)), ("cube", (d(x) ** 3).astype(np.float32))])
    gelu_erf = 0.5 * d(x) * (1.0 + erf(d(x) / math.sqrt(2.0)))
    gelu_tanh = 0.5 * d(x) * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (d(x) + 0.044715 * d(x) ** 3)))
    for name, approximate, y in [("gelu", "none", gelu_erf), ("gelu_tanh", "tanh", gelu_tanh)]:
        m = model(
            name,
            [helper.make_node("Gelu", ["x"], ["y"], name=name, approximate=approximate)],
            [io("x")],
            [io("y")],
            opset=20,
        )
        save(m, name, [("x", x)], [("y", y.astype(np.float32))])
    # The erf form as exporters write it (torch.nn.GELU before opset 20).
    consts = [
        numpy_helper.from_array(np.array(math.sqrt(2.0), np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    m = model(
        "gelu_pattern",
        [
            helper.make_node("Div", ["x", "sqrt2"], ["xd"], name="gelu/Div"),
            helper.make_node("Erf", ["xd"], ["e"], name="gelu/Erf"),
            helper.make_node("Add", ["e", "one"], ["e1"], name="gelu/Add"),
            helper.make_node("Mul", ["x", "e1"], ["xe"], name="gelu/Mul"),
            helper.make_node("Mul", ["xe", "half"], ["y"], name="gelu/Mul_1"),
        ],
        [io("x")],
        [io("y")],
        consts,
    )
    save(m, "gelu_pattern", [("x", x)], [("y", gelu_erf.astype(np.float32))])


def layer_norm_axis():
    """LayerNormalization (opset 17) over the last two axes of a 3-D input (axis 1), with the
    Mean and InvStdDev outputs read."""
    x, g, b = f32((2, 3, 4), 2.0), f32((3, 4)), f32((3, 4))
    m = model(
        "layer_norm_axis",
        [
            helper.make_node(
                "LayerNormalization", ["x", "g", "b"], ["y", "mean", "inv"], name="ln", axis=1, epsilon=1e-3
            )
        ],
        [helper.make_tensor_value_info("x", F, [2, 3, 4])],
        [
            helper.make_tensor_value_info("y", F, [2, 3, 4]),
            helper.make_tensor_value_info("mean", F, [2, 1, 1]),
            helper.make_tensor_value_info("inv", F, [2, 1, 1]),
        ],
        [numpy_helper.from_array(g, "g"), numpy_helper.from_array(b, "b")],
    )
    xd = d(x)
    mean = xd.mean(axis=(1, 2), keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=(1, 2), keepdims=True)
    inv = 1 / np.sqrt(var + 1e-3)
    y = (xd - mean) * inv * d(g) + d(b)
    outs = [("y", y), ("mean", mean), ("inv", inv)]
    save(m, "layer_norm_axis", [("x", x)], [(n, a.astype(np.float32)) for n, a in outs])


def attention_unfused():
    """Attention (opset 23) in the forms the graph's attention does not take: a past cache
    (present outputs read), causal with more keys than queries (the frontier offset by the
    past length), a soft cap, a run-time float mask with a fully masked row (output 0), and
    the post-softmax scores (qk_matmul_output_mode 3); then a constant boolean mask."""
    b, h, sq, past, new, dh = 1, 2, 3, 2, 3, 4
    q, k, v = f32((b, h, sq, dh)), f32((b, h, new, dh)), f32((b, h, new, dh))
    pk, pv = f32((b, h, past, dh)), f32((b, h, past, dh))
    skv = past + new
    mask = f32((sq, skv), 0.5)
    mask[1, :] = -np.inf
    softcap = 2.0
    m = model(
        "attention_unfused",
        [
            helper.make_node(
                "Attention",
                ["q", "k", "v", "mask", "past_k", "past_v"],
                ["y", "present_k", "present_v", "probs"],
                name="attn",
                is_causal=1,
                softcap=softcap,
                qk_matmul_output_mode=3,
            )
        ],
        [
            helper.make_tensor_value_info("q", F, list(q.shape)),
            helper.make_tensor_value_info("k", F, list(k.shape)),
            helper.make_tensor_value_info("v", F, list(v.shape)),
            helper.make_tensor_value_info("mask", F, list(mask.shape)),
            helper.make_tensor_value_info("past_k", F, list(pk.shape)),
            helper.make_tensor_value_info("past_v", F, list(pv.shape)),
        ],
        [
            helper.make_tensor_value_info("y", F, [b, h, sq, dh]),
            helper.make_tensor_value_info("present_k", F, [b, h, skv, dh]),
            helper.make_tensor_value_info("present_v", F, [b, h, skv, dh]),
            helper.make_tensor_value_info("probs", F, [b, h, sq, skv]),
        ],
        opset=23,
    )
    kk = np.concatenate([d(pk), d(k)], axis=2)
    vv = np.concatenate([d(pv), d(v)], axis=2)
    s = d(q) @ np.swapaxes(kk, -1, -2) / np.sqrt(dh)
    s = softcap * np.tanh(s / softcap)
    i, j = np.arange(sq)[:, None], np.arange(skv)[None, :]
    bias = np.where(j <= i + past, 0.0, -np.inf) + d(mask)
    s = s + bias
    row_max = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isneginf(row_max), 0.0, row_max))
    total = e.sum(axis=-1, keepdims=True)
    p = e / np.where(total == 0, 1.0, total)
    y = p @ vv
    outs = [("y", y), ("present_k", kk), ("present_v", vv), ("probs", p)]
    save(
        m,
        "attention_unfused",
        [("q", q), ("k", k), ("v", v), ("mask", mask), ("past_k", pk), ("past_v", pv)],
        [(n, a.astype(np.float32)) for n, a in outs],
    )

    sk = 4
    q, k, v = f32((b, h, sq, dh)), f32((b, h, sk, dh)), f32((b, h, sk, dh))
    keep = np.array([[True, True, False, True], [False, True, True, True], [True, False, False, False]])
    m = model(
        "attention_bool_mask",
        [helper.make_node("Attention", ["q", "k", "v", "keep"], ["y"], name="attn")],
        [
            helper.make_tensor_value_info("q", F, list(q.shape)),
            helper.make_tensor_value_info("k", F, list(k.shape)),
            helper.make_tensor_value_info("v", F, list(v.shape)),
        ],
        [helper.make_tensor_value_info("y", F, [b, h, sq, dh])],
        [numpy_helper.from_array(keep, "keep")],
        opset=23,
    )
    s = d(q) @ np.swapaxes(d(k), -1, -2) / np.sqrt(dh) + np.where(keep, 0.0, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    y = (e / e.sum(axis=-1, keepdims=True)) @ d(v)
    save(m, "attention_bool_mask", [("q", q), ("k", k), ("v", v)], [("y", y.astype(np.float32))])


def matmul_partial_broadcast():
    """MatMul whose operands broadcast different batch axes ([3, 1] against [1, 2])."""
    a, b = f32((3, 1, 2, 4)), f32((1, 2, 4, 3))
    m = model(
        "matmul_bcast",
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
        [helper.make_tensor_value_info("a", F, list(a.shape)), helper.make_tensor_value_info("b", F, list(b.shape))],
        [helper.make_tensor_value_info("y", F, [3, 2, 2, 3])],
    )
    save(m, "matmul_bcast", [("a", a), ("b", b)], [("y", (d(a) @ d(b)).astype(np.float32))])


def log():
    """Log (opset 13) of positive values spanning many binades, 1 among them."""
    x = np.exp(f32((3, 7), 8.0)).astype(np.float32)
    x[0, 0] = 1.0
    m = model(
        "log",
        [helper.make_node("Log", ["x"], ["y"], name="ln")],
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info("y", F, list(x.shape))],
        opset=13,
    )
    save(m, "log", [("x", x)], [("y", np.log(d(x)).astype(np.float32))])


def pow_exponents():
    """Pow (opset 15) with a known exponent varying along the last axis: 2, -3, 1.5 and 5
    (products, a reciprocal, exp(1.5 ln x) on positive bases, repeated squaring with negative
    bases)."""
    x = f32((3, 4))
    x[:, 2] = np.abs(x[:, 2]) + 0.5
    y = np.array([2.0, -3.0, 1.5, 5.0], dtype=np.float32)
    m = model(
        "pow_exponents",
        [helper.make_node("Pow", ["x", "y"], ["z"], name="pow")],
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info("z", F, list(x.shape))],
        [numpy_helper.from_array(y, "y")],
        opset=15,
    )
    save(m, "pow_exponents", [("x", x)], [("z", np.power(d(x), d(y)).astype(np.float32))])


def slice_steps():
    """Slice (opset 13) with steps other than 1: -1 along axis 0 (reversed), 2 along axis 1."""
    x = f32((4, 7))
    ints = lambda n, v: numpy_helper.from_array(np.array(v, dtype=np.int64), n)
    m = model(
        "slice_steps",
        [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"], name="sl")],
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info("y", F, [4, 3])],
        [ints("starts", [-1, 1]), ints("ends", [-100, 7]), ints("axes", [0, 1]), ints("steps", [-1, 2])],
        opset=13,
    )
    save(m, "slice_steps", [("x", x)], [("y", x[::-1, 1:7:2])])


def attention_causal_more_keys():
    """Attention (opset 23), causal with more keys than queries and no cache: the frontier is
    aligned top-left (query i sees keys 0..=i)."""
    q, k, v = f32((1, 2, 3, 4)), f32((1, 2, 5, 4)), f32((1, 2, 5, 4))
    m = model(
        "attention_causal_more_keys",
        [helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn", is_causal=1)],
        [helper.make_tensor_value_info(n, F, list(t.shape)) for n, t in [("q", q), ("k", k), ("v", v)]],
        [helper.make_tensor_value_info("y", F, [1, 2, 3, 4])],
        opset=23,
    )
    y = sdpa(q, k, v, 1 / np.sqrt(4), True)
    save(m, "attention_causal_more_keys", [("q", q), ("k", k), ("v", v)], [("y", y.astype(np.float32))])


def leaky_relu_alphas():
    """LeakyRelu with alpha above 1, below 0 and between, over values with NaN, infinities and
    signed zeros: y = x where x >= 0, else alpha x (float64 of f32 operands, exact)."""
    x = f32((3, 8))
    x[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    alphas = [2.5, -0.5, 0.1]
    outs = [f"y{i}" for i in range(len(alphas))]
    m = model(
        "leaky_relu_alphas",
        [helper.make_node("LeakyRelu", ["x"], [o], name=f"lr{i}", alpha=a) for i, (o, a) in enumerate(zip(outs, alphas))],
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info(o, F, list(x.shape)) for o in outs],
    )
    with np.errstate(invalid="ignore"):
        ys = [np.where(d(x) < 0, np.float64(np.float32(a)) * d(x), d(x)).astype(np.float32) for a in alphas]
    save(m, "leaky_relu_alphas", [("x", x)], list(zip(outs, ys)))


def pow_zero():
    """Pow (opset 15) with exponent 0, scalar and among others along the last axis: 1 for every
    base, NaN, infinities and zeros included (NumPy's and C's pow)."""
    x = f32((2, 6))
    x[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -2.0]
    e = np.array([0.0, 2.0, 0.0, 3.0, 0.0, 1.0], dtype=np.float32)
    zero = np.array(0.0, dtype=np.float32)
    m = model(
        "pow_zero",
        [
            helper.make_node("Pow", ["x", "zero"], ["y"], name="pow0"),
            helper.make_node("Pow", ["x", "e"], ["z"], name="pow_e"),
        ],
        [helper.make_tensor_value_info("x", F, list(x.shape))],
        [helper.make_tensor_value_info(n, F, list(x.shape)) for n in ["y", "z"]],
        [numpy_helper.from_array(zero, "zero"), numpy_helper.from_array(e, "e")],
        opset=15,
    )
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.power(d(x), 0.0).astype(np.float32)
        z = np.power(d(x), d(e)).astype(np.float32)
    save(m, "pow_zero", [("x", x)], [("y", y), ("z", z)])


def main():
    linear()
    linear_external()
    gemm_trans_b()
    head_split()
    softmax()
    layer_norm()
    mix()
    f16()
    fp8()
    errors()
    folding()
    attention()
    activations()
    layer_norm_axis()
    attention_unfused()
    matmul_partial_broadcast()
    log()
    pow_exponents()
    slice_steps()
    attention_causal_more_keys()
    leaky_relu_alphas()
    pow_zero()
    total = 0
    for root, _, files in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"wrote {OUT} ({total} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
