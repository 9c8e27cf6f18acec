//! The model-level import: opsets, inputs and their dimensions, initializers, the node walk,
//! outputs and their declared shapes. Operators are in `ops.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use ipu_graph::{GraphBuilder, OpKind, TensorType, ValueId};
use prost::Message as _;

use crate::known::{Elem, Known, elem_of_code, type_name};
use crate::options::ImportOptions;
use crate::proto::{self, AttributeProto, NodeProto, ValueInfoProto};
use crate::{Imported, OPSET_MAX, OPSET_MIN, OnnxError};

/// The default domain's name in messages.
pub const DEFAULT_DOMAIN: &str = "ai.onnx";

/// A tensor during import: a graph value, or a tensor known at import time.
#[derive(Debug, Clone)]
pub enum Val {
    /// A graph value (input, constant or operation output).
    Graph(ValueId),
    /// A known tensor, with the name of the ONNX tensor it was bound to or derived from (for
    /// the constant's name when it becomes graph data).
    Known(Rc<Known>, Option<String>),
}

impl Val {
    /// A known tensor without a name yet.
    pub fn known(k: Known) -> Val {
        Val::Known(Rc::new(k), None)
    }
}

/// A node being converted, for its inputs, attributes and errors.
pub struct Node<'n> {
    /// The name in messages: the node's name, or `#index` when it has none.
    pub name: String,
    /// Operator type.
    pub op_type: &'n str,
    /// The node.
    pub proto: &'n NodeProto,
}

impl<'n> Node<'n> {
    /// The name of input `i`, if given (an empty name is an omitted optional input).
    pub fn input_name(&self, i: usize) -> Option<&'n str> {
        self.proto
            .input
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// The attribute `name`, if set.
    pub fn attr(&self, name: &str) -> Option<&'n AttributeProto> {
        self.proto.attribute.iter().find(|a| a.name() == name)
    }

    /// An error about the operator itself.
    pub fn unsupported(&self, reason: impl Into<String>) -> OnnxError {
        OnnxError::UnsupportedOperator {
            node: self.name.clone(),
            op_type: self.op_type.to_string(),
            domain: DEFAULT_DOMAIN.to_string(),
            reason: reason.into(),
        }
    }

    /// An error about attribute `attribute`.
    pub fn bad_attr(&self, attribute: &str, reason: impl Into<String>) -> OnnxError {
        OnnxError::UnsupportedAttribute {
            node: self.name.clone(),
            op_type: self.op_type.to_string(),
            attribute: attribute.to_string(),
            reason: reason.into(),
        }
    }

    /// An error about input `i`.
    pub fn bad_input(&self, i: usize, reason: impl Into<String>) -> OnnxError {
        OnnxError::UnsupportedInput {
            node: self.name.clone(),
            op_type: self.op_type.to_string(),
            input: self.input_name(i).unwrap_or("").to_string(),
            reason: reason.into(),
        }
    }

    /// An error the graph IR or the folding evaluator raised.
    pub fn graph_error(&self, reason: impl Into<String>) -> OnnxError {
        OnnxError::Graph {
            node: self.name.clone(),
            op_type: self.op_type.to_string(),
            reason: reason.into(),
        }
    }

    /// An integer attribute, or `default`.
    pub fn int(&self, name: &str, default: i64) -> Result<i64, OnnxError> {
        match self.attr(name) {
            None => Ok(default),
            Some(a) if a.r#type() == proto::attribute_proto::AttributeType::Int => Ok(a.i()),
            Some(_) => Err(self.bad_attr(name, "must be an integer")),
        }
    }

    /// A float attribute, or `default`.
    pub fn float(&self, name: &str, default: f32) -> Result<f32, OnnxError> {
        match self.attr(name) {
            None => Ok(default),
            Some(a) if a.r#type() == proto::attribute_proto::AttributeType::Float => Ok(a.f()),
            Some(_) => Err(self.bad_attr(name, "must be a float")),
        }
    }

    /// An integer-list attribute, if set.
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OnnxError> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if a.r#type() == proto::attribute_proto::AttributeType::Ints => {
                Ok(Some(a.ints.clone()))
            }
            Some(_) => Err(self.bad_attr(name, "must be a list of integers")),
        }
    }

    /// Refuses attributes outside `known`.
    pub fn only_attrs(&self, known: &[&str]) -> Result<(), OnnxError> {
        for a in &self.proto.attribute {
            if !known.contains(&a.name()) {
                let known = if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                };
                return Err(self.bad_attr(
                    a.name(),
                    format!("not supported by the importer (supported: {known})"),
                ));
            }
        }
        Ok(())
    }
}

/// An axis attribute or input in `-rank..rank`, normalised.
pub fn normalize_axis(
    node: &Node<'_>,
    what: &str,
    axis: i64,
    rank: usize,
) -> Result<usize, OnnxError> {
    let r = rank as i64;
    if !(-r..r).contains(&axis) {
        return Err(node.bad_attr(
            what,
            format!("axis {axis} is outside -{r}..{r} for rank {rank}"),
        ));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// The state of an import.
pub struct Importer<'o> {
    /// The model's opset of the default domain.
    pub opset: i64,
    pub(crate) options: &'o ImportOptions<'o>,
    pub(crate) b: GraphBuilder,
    vals: HashMap<String, Val>,
    /// Graph names: reserved (false) or taken by a value (true).
    names: BTreeMap<String, bool>,
    /// ONNX name → its graph name.
    graph_names: HashMap<String, String>,
    /// Known tensors already made graph constants, by name and shape (a hit is used only if
    /// the data is the same too).
    constants: HashMap<(String, Vec<usize>), (Rc<Known>, ValueId)>,
    pub(crate) notes: Vec<String>,
    folded: Vec<String>,
}

/// A graph name for an ONNX name: characters outside `[A-Za-z0-9_.-]` become `_`, leading
/// `/` (exporters' scope paths) and `-` go.
fn sanitize(name: &str) -> String {
    let s: String = name
        .trim_start_matches(['/', '-'])
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "_".to_string() } else { s }
}

impl Importer<'_> {
    /// The graph name reserved for ONNX tensor `onnx` (the same for every call).
    pub fn reserve(&mut self, onnx: &str) -> String {
        if let Some(n) = self.graph_names.get(onnx) {
            return n.clone();
        }
        let base = sanitize(onnx);
        let mut name = base.clone();
        let mut n = 1;
        while self.names.contains_key(&name) {
            name = format!("{base}.{n}");
            n += 1;
        }
        self.names.insert(name.clone(), false);
        self.graph_names.insert(onnx.to_string(), name.clone());
        name
    }

    /// A name for a new value: `base` if it is free or only reserved, else `base.N`.
    pub fn claim(&mut self, base: &str) -> String {
        match self.names.get(base) {
            None | Some(false) => {
                self.names.insert(base.to_string(), true);
                base.to_string()
            }
            Some(true) => {
                let mut n = 1;
                loop {
                    let name = format!("{base}.{n}");
                    if !self.names.contains_key(&name) {
                        self.names.insert(name.clone(), true);
                        return name;
                    }
                    n += 1;
                }
            }
        }
    }

    /// The element type and shape of a tensor.
    pub fn ty(&self, v: &Val) -> (Elem, Vec<usize>) {
        match v {
            Val::Graph(id) => {
                let t = self.b.ty(*id);
                (Elem::of_dtype(t.dtype), t.shape.clone())
            }
            Val::Known(k, _) => (k.elem, k.shape.clone()),
        }
    }

    /// The shape of a tensor.
    pub fn shape(&self, v: &Val) -> Vec<usize> {
        self.ty(v).1
    }

    /// Adds an operation named `name` (claimed here).
    pub fn op(
        &mut self,
        node: &Node<'_>,
        name: &str,
        kind: OpKind,
        ins: &[ValueId],
    ) -> Result<ValueId, OnnxError> {
        let name = self.claim(name);
        self.b
            .op(name, kind, ins)
            .map_err(|e| node.graph_error(e.to_string()))
    }

    /// The graph value of a tensor used as data by `node` (its input `input`): a known tensor
    /// becomes a graph constant (once per ONNX name and shape), named after its ONNX name or
    /// `hint`.
    pub fn data(
        &mut self,
        node: &Node<'_>,
        input: usize,
        v: &Val,
        hint: &str,
    ) -> Result<ValueId, OnnxError> {
        let (k, origin) = match v {
            Val::Graph(id) => return Ok(*id),
            Val::Known(k, origin) => (k, origin),
        };
        let Some(dtype) = k.elem.device_dtype() else {
            return Err(node.bad_input(
                input,
                format!(
                    "a {} tensor used as data: the device holds floats, FP8 and the MX formats, \
                     integers of 16 bits or fewer and bool",
                    k.elem.name()
                ),
            ));
        };
        // Known integers are held as i64 values; the device layout is the dtype's. 32- and
        // 64-bit ones only as far as the host reference holds them exactly (as f32).
        if dtype.class() == ipu_graph::DTypeClass::Wide
            && let Some(v) = k
                .ints()
                .unwrap_or_default()
                .into_iter()
                .find(|v| v.abs() > ipu_graph::WIDE_INT_MAX)
        {
            return Err(node.bad_input(
                input,
                format!(
                    "the {} value {v} used as data is beyond ±2^24, which the host reference \
                     cannot hold exactly (32- and 64-bit integers are moved, not computed)",
                    k.elem.name()
                ),
            ));
        }
        let device_bytes = k.device_bytes(dtype);
        let key = origin.as_ref().map(|o| (o.clone(), k.shape.clone()));
        if let Some((known, id)) = key.as_ref().and_then(|key| self.constants.get(key))
            && (Rc::ptr_eq(known, k) || known.bytes == k.bytes)
        {
            return Ok(*id);
        }
        let base = match origin {
            Some(o) => self.reserve(o),
            None => hint.to_string(),
        };
        let name = self.claim(&base);
        let id = self
            .b
            .constant(name, TensorType::new(dtype, k.shape.clone()), device_bytes)
            .map_err(|e| node.bad_input(input, e.to_string()))?;
        if let Some(key) = key {
            self.constants.insert(key, (k.clone(), id));
        }
        Ok(id)
    }

    /// The known tensor of input `i` of `node`, or an error saying it must be known.
    pub fn known_input(
        &self,
        node: &Node<'_>,
        ins: &[Option<Val>],
        i: usize,
    ) -> Result<Rc<Known>, OnnxError> {
        match ins.get(i).and_then(Option::as_ref) {
            Some(Val::Known(k, _)) => Ok(k.clone()),
            Some(Val::Graph(_)) => Err(node.bad_input(
                i,
                "must be known at import (a constant or computed from shapes); it is computed at run time",
            )),
            None => Err(node.bad_input(i, "is required")),
        }
    }

    /// Integer values of known input `i`.
    pub fn int_input(
        &self,
        node: &Node<'_>,
        ins: &[Option<Val>],
        i: usize,
    ) -> Result<Vec<i64>, OnnxError> {
        let k = self.known_input(node, ins, i)?;
        k.ints().ok_or_else(|| {
            node.bad_input(
                i,
                format!("must be an integer tensor, not {}", k.elem.name()),
            )
        })
    }

    /// Records that `node` was evaluated at import.
    pub fn note_folded(&mut self, node: &Node<'_>) {
        self.folded.push(node.name.clone());
    }
}

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
        Ok(e)
            if e.device_dtype()
                .is_some_and(|d| d.class() != ipu_graph::DTypeClass::Wide) =>
        {
            e.device_dtype().expect("checked")
        }
        Ok(_) => {
            return Err(OnnxError::UnsupportedType {
                tensor: name.to_string(),
                data_type: type_name(code),
                reason: "graph inputs must be floats, FP8, the MX formats, integers of 16 bits \
                         or fewer or bool (wider integers and double are folded only)"
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
    if t.elem_type.is_some_and(|c| c != 0 && c != elem.code()) {
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
    let mut imp = Importer {
        opset,
        options,
        b: GraphBuilder::new(graph_name),
        vals: HashMap::new(),
        names: BTreeMap::new(),
        graph_names: HashMap::new(),
        constants: HashMap::new(),
        notes: Vec::new(),
        folded: Vec::new(),
    };

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
        let outs = crate::ops::convert(&mut imp, &node, &ins, &read)?;
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

    let mut renamed = BTreeMap::new();
    for (onnx, g) in &imp.graph_names {
        if onnx != g && imp.names.get(g) == Some(&true) {
            renamed.insert(onnx.clone(), g.clone());
        }
    }
    let graph = imp
        .b
        .finish()
        .map_err(|e| malformed(format!("the imported graph does not verify: {e}")))?;
    Ok(Imported {
        graph,
        renamed,
        folded: imp.folded,
        notes: imp.notes,
    })
}
