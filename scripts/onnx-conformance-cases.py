#!/usr/bin/env python3
"""Writes the in-scope ONNX backend node test cases for scripts/onnx-conformance.sh.

The cases come from the installed onnx package (`onnx.backend.test.case.node.collect_testcases`,
the generator of the suite's `onnx/backend/test/data/node/*` directories), each written as

    OUT/NAME/model.onnx
    OUT/NAME/test_data_set_0/input_K.pb, output_K.pb

and listed in OUT/cases.tsv, one line per case: name, tested op type, and the `--dim NAME=VALUE`
bindings of symbolic input dimensions (taken from the data set's arrays), space-separated.

A case is in scope when the operator it tests (the node given to the suite's `expect`; for an
`_expanded` case, the operator whose function body it holds) is in OPS below, the operators the
importer maps. An expanded case is in scope only when every operator of the body is in OPS too:
its other operators (CastLike, ReduceLogSum, ...) are outside the importer's list by design.

Inputs that are not floating point (int64 shapes, axes, indices, starts, bool conditions)
become initializers holding the data set's values: the compiler needs shapes and indices at
compile time, as exported models give them. Float inputs stay inputs, and so do the integer
and bool inputs of 16 bits or fewer that a single-node case's operator takes as data
(DATA_INPUTS: the operands of Add, Sub, Mul and Div, of the comparisons and logical operators
and of Where, the input of Cast and of DequantizeLinear), which the device holds, and the 32-
and 64-bit integer inputs it takes as data (WIDE_DATA_INPUTS: the indices of Gather, the
operands of the comparisons and of Where, the input of Cast) when their values lie within 2^24,
which the device holds as 32-bit. Only the first data set of a case is written.
"""

import os
import re
import shutil
import sys
import warnings

import numpy as np
from onnx import TensorProto, numpy_helper

OPS = set(
    """MatMul Gemm Add Sub Mul Div Pow Sqrt Reciprocal Neg Exp Log Tanh Erf Relu LeakyRelu
    Sigmoid Gelu Softmax LayerNormalization ReduceMean ReduceSum ReduceMax Transpose Reshape
    Flatten Squeeze Unsqueeze Concat Slice Split Gather Where Expand Cast QuantizeLinear Sin Cos
    DequantizeLinear Constant ConstantOfShape Shape Identity Dropout Attention Equal Less Greater
    LessOrEqual GreaterOrEqual Not And Or Xor IsNaN IsInf GatherElements GatherND CumSum Min Max
    Clip Trilu Range RMSNormalization RotaryEmbedding""".split()
)

FLOAT_TYPES = {
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.BFLOAT16,
    TensorProto.DOUBLE,
    TensorProto.FLOAT8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ,
    TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ,
    TensorProto.FLOAT4E2M1,
    TensorProto.FLOAT8E8M0,
}

# Integer and bool types the device holds as data, and the operators (with the input positions)
# that take them as data: those inputs stay inputs.
DEVICE_INT_TYPES = {
    TensorProto.INT8,
    TensorProto.UINT8,
    TensorProto.INT16,
    TensorProto.UINT16,
    TensorProto.INT4,
    TensorProto.UINT4,
    TensorProto.INT2,
    TensorProto.UINT2,
    TensorProto.BOOL,
}
DATA_INPUTS = {"Add": {0, 1}, "Sub": {0, 1}, "Mul": {0, 1}, "Div": {0, 1}, "Cast": {0}, "DequantizeLinear": {0}}
for _op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"):
    DATA_INPUTS[_op] = {0, 1}
DATA_INPUTS["Not"] = {0}
DATA_INPUTS["Where"] = {0, 1, 2}

# 32- and 64-bit integers, which the device holds as 32-bit (values within 2^24), stay inputs
# where the operator takes them as data: run-time token ids and masks.
WIDE_INT_TYPES = {TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32, TensorProto.UINT64}
WIDE_DATA_INPUTS = {
    "Gather": {1},
    "Cast": {0},
    "Equal": {0, 1},
    "Less": {0, 1},
    "Greater": {0, 1},
    "LessOrEqual": {0, 1},
    "GreaterOrEqual": {0, 1},
    "Where": {1, 2},
    "CumSum": {0},
}

EXPANDED = re.compile(r"^(.*)_expanded(_ver\d+)?$")


def as_proto(value, name):
    if isinstance(value, TensorProto):
        t = TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    return numpy_helper.from_array(np.asarray(value), name)


def main():
    out = sys.argv[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    tested = {}
    for c in cases:
        if not EXPANDED.match(c.name) and len(c.model.graph.node) == 1:
            tested[c.name] = c.model.graph.node[0].op_type
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    rows = []
    left_out = 0
    for c in cases:
        m = EXPANDED.match(c.name)
        op = tested.get(m.group(1) if m else c.name)
        if op not in OPS:
            continue
        if m and any(n.op_type not in OPS for n in c.model.graph.node):
            left_out += 1
            continue
        model = c.model
        inputs, outputs = c.data_sets[0]
        graph = model.graph
        kept_vi, kept_values = [], []
        single = len(graph.node) == 1
        data_inputs = DATA_INPUTS.get(op, set()) if single else set()
        wide_inputs = WIDE_DATA_INPUTS.get(op, set()) if single else set()
        for k, (vi, value) in enumerate(zip(list(graph.input), inputs)):
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            as_data = tt is not None and (
                (tt.elem_type in DEVICE_INT_TYPES and k in data_inputs)
                or (
                    tt.elem_type in WIDE_INT_TYPES
                    and k in wide_inputs
                    and np.all(np.abs(np.asarray(value, dtype=np.float64)) <= 2**24)
                )
            )
            if tt is not None and tt.elem_type not in FLOAT_TYPES and not as_data:
                graph.initializer.append(as_proto(value, vi.name))
            else:
                kept_vi.append(vi)
                kept_values.append(value)
        del graph.input[:]
        graph.input.extend(kept_vi)
        dims = {}
        for vi, value in zip(kept_vi, kept_values):
            if not vi.type.HasField("tensor_type"):
                continue
            shape = np.shape(value) if not isinstance(value, TensorProto) else tuple(value.dims)
            for axis, d in enumerate(vi.type.tensor_type.shape.dim):
                if d.HasField("dim_param") and axis < len(shape):
                    dims[d.dim_param] = shape[axis]
        case_dir = os.path.join(out, c.name)
        data_dir = os.path.join(case_dir, "test_data_set_0")
        os.makedirs(data_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        for k, (vi, value) in enumerate(zip(kept_vi, kept_values)):
            with open(os.path.join(data_dir, f"input_{k}.pb"), "wb") as f:
                f.write(as_proto(value, vi.name).SerializeToString())
        for k, (vi, value) in enumerate(zip(graph.output, outputs)):
            with open(os.path.join(data_dir, f"output_{k}.pb"), "wb") as f:
                f.write(as_proto(value, vi.name).SerializeToString())
        bindings = " ".join(f"{k}={v}" for k, v in sorted(dims.items()))
        rows.append(f"{c.name}\t{op}\t{bindings}")
    with open(os.path.join(out, "cases.tsv"), "w") as f:
        f.write("\n".join(sorted(rows)) + "\n")
    print(
        f"{len(rows)} in-scope cases written to {out} ({left_out} expanded cases left out: "
        "their function bodies use operators outside the list)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
