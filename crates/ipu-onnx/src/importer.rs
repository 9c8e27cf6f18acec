//! The state of an import and what the operators read through it: the tensors of the import
//! ([`Val`]), the node being converted ([`Node`]: its inputs, attributes and errors), and the
//! [`Importer`] that names values, adds operations and turns known tensors into constants.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use ipu_graph::{GraphBuilder, OpKind, TensorType, ValueId};

use crate::OnnxError;
use crate::known::{Elem, Known};
use crate::options::ImportOptions;
use crate::proto::{self, AttributeProto, NodeProto};

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
    /// The tensor names some node or a graph output reads.
    pub read: &'n BTreeSet<&'n str>,
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

    /// True if output `i` is given and some node or a graph output reads it.
    pub fn output_read(&self, i: usize) -> bool {
        self.proto
            .output
            .get(i)
            .is_some_and(|o| !o.is_empty() && self.read.contains(o.as_str()))
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
    /// ONNX tensor name → its value.
    pub(crate) vals: HashMap<String, Val>,
    /// Graph names: reserved (false) or taken by a value (true).
    names: BTreeMap<String, bool>,
    /// ONNX name → its graph name.
    graph_names: HashMap<String, String>,
    /// Known tensors already made graph constants, by name and shape (a hit is used only if
    /// the data is the same too).
    constants: HashMap<(String, Vec<usize>), (Rc<Known>, ValueId)>,
    pub(crate) notes: Vec<String>,
    /// Names of the nodes evaluated at import.
    pub(crate) folded: Vec<String>,
}

/// A graph name for an ONNX name: characters outside `[A-Za-z0-9_.-]` become `_`, leading
/// `/` (exporters' scope paths) and `-` go.
pub(crate) fn sanitize(name: &str) -> String {
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

impl<'o> Importer<'o> {
    /// The state of an import at `opset` into a graph named `graph_name`, with no tensors yet.
    pub fn new(opset: i64, options: &'o ImportOptions<'o>, graph_name: String) -> Importer<'o> {
        Importer {
            opset,
            options,
            b: GraphBuilder::new(graph_name),
            vals: HashMap::new(),
            names: BTreeMap::new(),
            graph_names: HashMap::new(),
            constants: HashMap::new(),
            notes: Vec::new(),
            folded: Vec::new(),
        }
    }

    /// ONNX tensor names whose graph names differ (the values only, not names merely
    /// reserved), ONNX name → graph name.
    pub fn renamed(&self) -> BTreeMap<String, String> {
        let mut renamed = BTreeMap::new();
        for (onnx, g) in &self.graph_names {
            if onnx != g && self.names.get(g) == Some(&true) {
                renamed.insert(onnx.clone(), g.clone());
            }
        }
        renamed
    }

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
