//! The model-level import: opsets, inputs and their dimensions, initializers, the node walk,
//! outputs and their declared shapes. The operators are in `ops/`, the state they share in
//! `importer.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use ipu_graph::{OpKind, TensorType, ValueId};
use prost::Message as _;

use crate::OnnxError;
use crate::importer::{DEFAULT_DOMAIN, Importer, Node, Val, sanitize};
use crate::known::{Elem, elem_of_code, type_name};
use crate::options::ImportOptions;
use crate::proto::{self, NodeProto, ValueInfoProto};

fn malformed(reason: impl Into<String>) -> OnnxError {
    OnnxError::Malformed {
        reason: reason.into(),
    }
}

/// The dtype and shape of graph input `vi`, with symbolic dimensions bound from `dims`.
fn input_type(
    vi: &ValueInfoProto,
    dims: &BTreeMap<String, usize>,
    used: &mut BTreeSet<String>,
) -> Result<TensorType, OnnxError> {
    let name = vi.name();
    let Some(proto::type_proto::Value::TensorType(t)) =
        vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(OnnxError::UnsupportedType {
            tensor: name.to_string(),
            data_type: "non-tensor".into(),
            reason: "graph inputs must be tensors".into(),
        });
    };
    let code = t.elem_type();
    let dtype = match elem_of_code(code) {
        // 32- and 64-bit integers (token ids, masks, positions) are held as 32-bit on the
        // device; the host narrows them when it writes the input, refusing a value the device
        // form cannot hold.
        Ok(e)
            if e.device_dtype()
                .is_some_and(|d| d.class() == ipu_graph::DTypeClass::Wide) =>
        {
            ipu_graph::DType::I32
        }
        Ok(e) if e.device_dtype().is_some() => e.device_dtype().expect("checked"),
        Ok(_) => {
            return Err(OnnxError::UnsupportedType {
                tensor: name.to_string(),
                data_type: type_name(code),
                reason: "graph inputs must be floats, FP8, the MX formats, integers or bool \
                         (double is folded only)"
                    .into(),
            });
        }
        Err(reason) => {
            return Err(OnnxError::UnsupportedType {
                tensor: name.to_string(),
                data_type: type_name(code),
                reason: reason.into(),
            });
        }
    };
    let Some(shape) = &t.shape else {
        return Err(malformed(format!("input `{name}` has no shape")));
    };
    let mut out = Vec::with_capacity(shape.dim.len());
    for (axis, d) in shape.dim.iter().enumerate() {
        use proto::tensor_shape_proto::dimension::Value;
        let size = match &d.value {
            Some(Value::DimValue(v)) if *v > 0 => *v as usize,
            Some(Value::DimValue(v)) => {
                return Err(malformed(format!(
                    "input `{name}`: dimension {axis} has size {v}"
                )));
            }
            Some(Value::DimParam(p)) if !p.is_empty() => {
                used.insert(p.clone());
                match dims.get(p) {
                    Some(0) => {
                        return Err(OnnxError::DimensionMismatch {
                            tensor: name.to_string(),
                            axis,
                            declared: format!("`{p}`, at least 1"),
                            actual: 0,
                        });
                    }
                    Some(&v) => v,
                    None => {
                        return Err(OnnxError::UnboundDimension {
                            input: name.to_string(),
                            dim: p.clone(),
                        });
                    }
                }
            }
            _ => {
                return Err(OnnxError::UnnamedDimension {
                    input: name.to_string(),
                    axis,
                });
            }
        };
        out.push(size);
    }
    // The device holds no rank-0 tensors: a scalar input is the one-element vector [1], which
    // broadcasts as the scalar does.
    if out.is_empty() {
        out.push(1);
    }
    let ty = TensorType::new(dtype, out);
    ty.check()
        .map_err(|reason| malformed(format!("input `{name}`: {reason}")))?;
    Ok(ty)
}

/// Checks a graph output's declared element type and shape against the imported value.
fn check_declared(
    vi: &ValueInfoProto,
    elem: Elem,
    shape: &[usize],
    dims: &BTreeMap<String, usize>,
) -> Result<(), OnnxError> {
    let name = vi.name();
    let Some(proto::type_proto::Value::TensorType(t)) =
        vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Ok(());
    };
    // A run-time 32- or 64-bit integer is 32-bit on the device.
    let wide = |c: i32| {
        matches!(
            c,
            crate::known::code::INT32
                | crate::known::code::INT64
                | crate::known::code::UINT32
                | crate::known::code::UINT64
        )
    };
    if t.elem_type
        .is_some_and(|c| c != 0 && c != elem.code() && !(wide(c) && wide(elem.code())))
    {
        return Err(malformed(format!(
            "output `{name}` is declared {} but the graph computes {}",
            type_name(t.elem_type()),
            elem.name()
        )));
    }
    let Some(declared) = &t.shape else {
        return Ok(());
    };
    if declared.dim.len() != shape.len() {
        return Err(OnnxError::DimensionMismatch {
            tensor: name.to_string(),
            axis: declared.dim.len().min(shape.len()),
            declared: format!("of rank {}", declared.dim.len()),
            actual: shape.len(),
        });
    }
    for (axis, (d, &actual)) in declared.dim.iter().zip(shape).enumerate() {
        use proto::tensor_shape_proto::dimension::Value;
        let (want, text) = match &d.value {
            Some(Value::DimValue(v)) => (Some(*v), v.to_string()),
            Some(Value::DimParam(p)) => match dims.get(p) {
                Some(&v) => (Some(v as i64), format!("`{p}` = {v}")),
                None => (None, String::new()),
            },
            None => (None, String::new()),
        };
        if let Some(want) = want
            && want != actual as i64
        {
            return Err(OnnxError::DimensionMismatch {
                tensor: name.to_string(),
                axis,
                declared: text,
                actual,
            });
        }
    }
    Ok(())
}

/// The default domain's opset of `model`, checked against the supported range.
fn default_opset(model: &proto::ModelProto) -> Result<i64, OnnxError> {
    let mut found = None;
    for o in &model.opset_import {
        if o.domain() == "" || o.domain() == DEFAULT_DOMAIN {
            if found.is_some_and(|v| v != o.version()) {
                return Err(malformed(
                    "the default domain is imported twice with different versions",
                ));
            }
            found = Some(o.version());
        }
    }
    let version =
        found.ok_or_else(|| malformed("the model imports no opset of the default domain"))?;
    if version > OPSET_MAX {
        return Err(OnnxError::OpsetTooNew {
            domain: DEFAULT_DOMAIN.into(),
            version,
            max: OPSET_MAX,
        });
    }
    if version < OPSET_MIN {
        return Err(OnnxError::OpsetTooOld {
            domain: DEFAULT_DOMAIN.into(),
            version,
            min: OPSET_MIN,
        });
    }
    Ok(version)
}

/// The oldest opset of the default domain the importer supports: opset 13 fixed the semantics
/// of `Softmax` (one axis), and moved `Squeeze`, `Unsqueeze`, `Split` and `ReduceSum` axes to
/// inputs.
pub const OPSET_MIN: i64 = 13;
/// The newest opset of the default domain the importer supports: opset 28, onnx 1.23's (the
/// ONNX backend node tests write each model at its operator's newest version). From opset 24
/// to 28 the operators the importer maps or folds changed only by new element types
/// (float8e8m0, int2, uint2, float6), which it refuses by type, by `Cast`'s and `CastLike`'s
/// `round_mode` (float8e8m0 only), `Range`'s `stash_type`, and `Attention`'s
/// `nonpad_kv_seqlen` input and window sizes, which it refuses when given; a newer model is
/// refused rather than imported by guesswork.
pub const OPSET_MAX: i64 = 28;

/// An imported model.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The graph (verified).
    pub graph: ipu_graph::Graph,
    /// ONNX tensor names that had to change to become graph value names (characters outside
    /// `[A-Za-z0-9_.-]`, duplicates), ONNX name → graph name; inputs and outputs included.
    pub renamed: BTreeMap<String, String>,
    /// Names of the nodes evaluated at import (their inputs were all known).
    pub folded: Vec<String>,
    /// What the import did that a reader of the log may want to know (decompositions, skipped
    /// no-ops), one line each.
    pub notes: Vec<String>,
}

/// Imports the ONNX model `bytes` (a serialised `ModelProto`).
pub fn import(bytes: &[u8], options: &ImportOptions<'_>) -> Result<Imported, OnnxError> {
    let model = proto::ModelProto::decode(bytes)
        .map_err(|e| malformed(format!("not an ONNX model (protobuf: {e})")))?;
    let opset = default_opset(&model)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| malformed("the model has no graph"))?;
    if graph.output.is_empty() {
        return Err(malformed("the graph has no outputs"));
    }
    if let Some(s) = graph.sparse_initializer.first() {
        return Err(OnnxError::UnsupportedType {
            tensor: s
                .values
                .as_ref()
                .map(|v| v.name().to_string())
                .unwrap_or_default(),
            data_type: "sparse".into(),
            reason: "sparse initializers are not supported".into(),
        });
    }
    let graph_name = if graph.name().is_empty() {
        "model".to_string()
    } else {
        sanitize(graph.name())
    };
    let mut imp = Importer::new(opset, options, graph_name);

    // Initializers: known tensors. An input with the same name is a constant, not an input.
    let mut initializers = BTreeSet::new();
    for t in &graph.initializer {
        let name = t.name();
        if name.is_empty() {
            return Err(malformed("an initializer has no name"));
        }
        if !initializers.insert(name.to_string()) {
            return Err(malformed(format!("initializer `{name}` is defined twice")));
        }
        let k = crate::tensor::decode(t, name, options)?;
        imp.vals.insert(
            name.to_string(),
            Val::Known(Rc::new(k), Some(name.to_string())),
        );
    }
    let mut used_dims = BTreeSet::new();
    for vi in &graph.input {
        let name = vi.name();
        if initializers.contains(name) {
            continue;
        }
        if name.is_empty() || imp.vals.contains_key(name) {
            return Err(malformed(format!(
                "graph input `{name}` is unnamed or defined twice"
            )));
        }
        let ty = input_type(vi, &options.dims, &mut used_dims)?;
        let gname = imp.reserve(name);
        let gname = imp.claim(&gname);
        let id = imp.b.input(gname, ty);
        imp.vals.insert(name.to_string(), Val::Graph(id));
    }
    if let Some(dim) = options.dims.keys().find(|d| !used_dims.contains(*d)) {
        return Err(OnnxError::UnusedDimension { dim: dim.clone() });
    }

    // Names some node or the graph reads: an optional output nobody reads may be left out.
    let mut read: BTreeSet<&str> = graph.output.iter().map(|o| o.name()).collect();
    for n in &graph.node {
        read.extend(n.input.iter().map(String::as_str));
    }

    for (index, n) in graph.node.iter().enumerate() {
        let node = Node {
            name: if n.name().is_empty() {
                format!("#{index}")
            } else {
                n.name().to_string()
            },
            op_type: n.op_type(),
            proto: n,
            read: &read,
        };
        let domain = n.domain();
        if !(domain.is_empty() || domain == DEFAULT_DOMAIN) {
            return Err(OnnxError::UnsupportedOperator {
                node: node.name.clone(),
                op_type: node.op_type.to_string(),
                domain: domain.to_string(),
                reason: "only the default domain's operators are supported".into(),
            });
        }
        let mut ins = Vec::with_capacity(n.input.len());
        for name in &n.input {
            if name.is_empty() {
                ins.push(None);
                continue;
            }
            let v = imp.vals.get(name).cloned().ok_or_else(|| {
                malformed(format!(
                    "node `{}` reads `{name}` before it is defined (nodes must be in topological order)",
                    node.name
                ))
            })?;
            ins.push(Some(v));
        }
        let outs = crate::ops::convert(&mut imp, &node, &ins)?;
        let folded = !outs.is_empty()
            && outs
                .iter()
                .all(|o| matches!(o, None | Some(Val::Known(..))))
            && !n.output.is_empty();
        if folded && node.op_type != "Constant" {
            imp.note_folded(&node);
        }
        for (i, name) in n.output.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let v = match outs.get(i).cloned().flatten() {
                Some(v) => v,
                None if !read.contains(name.as_str()) => continue,
                None => {
                    return Err(node.unsupported(format!("output {i} (`{name}`) is not produced")));
                }
            };
            // A known output is named after the output (a reshaped initializer is a new
            // tensor).
            let v = match v {
                Val::Known(k, _) => Val::Known(k, Some(name.clone())),
                v => v,
            };
            if imp.vals.insert(name.clone(), v).is_some() {
                return Err(malformed(format!("tensor `{name}` is defined twice")));
            }
        }
    }

    // Outputs: every graph output is a value named after it.
    let mut outputs: BTreeSet<ValueId> = BTreeSet::new();
    let no_node = NodeProto::default();
    for vi in &graph.output {
        let name = vi.name();
        let v = imp.vals.get(name).cloned().ok_or_else(|| {
            malformed(format!("graph output `{name}` is not computed by any node"))
        })?;
        let (elem, shape) = imp.ty(&v);
        check_declared(vi, elem, &shape, &options.dims)?;
        let node = Node {
            name: format!("output {name}"),
            op_type: "output",
            proto: &no_node,
            read: &read,
        };
        if elem.device_dtype().is_none() {
            return Err(OnnxError::UnsupportedType {
                tensor: name.to_string(),
                data_type: elem.name(),
                reason: "graph outputs must be floats, FP8, the MX formats, integers of 16 bits \
                         or fewer or bool"
                    .into(),
            });
        }
        let want = imp.reserve(name);
        // A known output becomes a constant under another name and a copy under the output's.
        let v = match v {
            Val::Known(k, _) => Val::Known(k, Some(format!("{name}.const"))),
            other => other,
        };
        let mut id = imp.data(&node, 0, &v, &want)?;
        // A constant output is copied too: the device computes every output.
        if imp.b.value(id).name != want
            || outputs.contains(&id)
            || imp.b.value(id).producer.is_none()
        {
            // A copy under the output's name: a reshape to the same shape.
            let shape = imp.b.ty(id).shape.clone();
            id = imp.op(&node, &want, OpKind::Reshape { shape }, &[id])?;
        }
        outputs.insert(id);
        imp.b.output(id);
    }

    let renamed = imp.renamed();
    let graph = imp
        .b
        .finish()
        .map_err(|e| malformed(format!("the imported graph does not verify: {e}")))?;
    // A tied embedding (the LM head reads the table's transpose) is held once.
    let (graph, tied) = ipu_graph::tied::share_tied_tables(&graph)
        .map_err(|e| malformed(format!("the imported graph does not verify: {e}")))?;
    let mut notes = imp.notes;
    for t in tied {
        notes.push(format!(
            "`{}` is `{}` transposed: held once, {} read its columns",
            t.table,
            t.held,
            t.lookups.join(", ")
        ));
    }
    Ok(Imported {
        graph,
        renamed,
        folded: imp.folded,
        notes,
    })
}
