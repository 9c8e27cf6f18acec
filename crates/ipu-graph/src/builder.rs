//! Building graphs from Rust with type inference at each step.

use crate::{
    Constant, ConstantData, DType, Graph, GraphError, OpKind, Operation, OperationId, TensorType,
    Value, ValueId, encode_elements, infer,
};

/// Builds a [`Graph`]: declare inputs, add operations (their output types are inferred), mark
/// outputs, then [`GraphBuilder::finish`] verifies the result.
///
/// ```
/// use ipu_graph::{DType, GraphBuilder, OpKind, TensorType};
/// let mut b = GraphBuilder::new("mm");
/// let a = b.input("a", TensorType::new(DType::F16, [4, 8]));
/// let w = b.input("w", TensorType::new(DType::F16, [8, 2]));
/// let c = b.op("c", OpKind::MatMul { partials: DType::F32, out: DType::F16 }, &[a, w]).unwrap();
/// b.output(c);
/// let g = b.finish().unwrap();
/// assert_eq!(g.value(c).ty.shape, vec![4, 2]);
/// ```
#[derive(Debug, Clone)]
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    /// An empty graph named `name`.
    pub fn new(name: impl Into<String>) -> GraphBuilder {
        GraphBuilder {
            graph: Graph {
                name: name.into(),
                values: Vec::new(),
                operations: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                constants: Vec::new(),
            },
        }
    }

    /// Declares a graph input.
    pub fn input(&mut self, name: impl Into<String>, ty: TensorType) -> ValueId {
        let id = ValueId(self.graph.values.len() as u32);
        self.graph.values.push(Value {
            name: name.into(),
            ty,
            producer: None,
        });
        self.graph.inputs.push(id);
        id
    }

    /// Declares a constant of type `ty` whose elements are `data` in device layout (row-major;
    /// f32 and f16 little-endian, FP8 one code per element). Errors if the type is invalid or
    /// the data does not have the type's byte count.
    pub fn constant(
        &mut self,
        name: impl Into<String>,
        ty: TensorType,
        data: impl Into<ConstantData>,
    ) -> Result<ValueId, GraphError> {
        let name = name.into();
        let data = data.into();
        let value_err = |reason: String| GraphError::Value {
            value: name.clone(),
            reason,
        };
        ty.check().map_err(value_err)?;
        if data.len() != ty.bytes() {
            return Err(value_err(format!(
                "constant data has {} bytes but {ty} needs {}",
                data.len(),
                ty.bytes()
            )));
        }
        let id = ValueId(self.graph.values.len() as u32);
        self.graph.values.push(Value {
            name,
            ty,
            producer: None,
        });
        self.graph.constants.push(Constant { value: id, data });
        Ok(id)
    }

    /// Declares a constant from f32 values, encoded into `ty`'s dtype (f16 and FP8 round to
    /// nearest even, FP8 saturates; see [`encode_elements`]).
    pub fn constant_values(
        &mut self,
        name: impl Into<String>,
        ty: TensorType,
        values: &[f32],
    ) -> Result<ValueId, GraphError> {
        let name = name.into();
        if values.len() != ty.elements() {
            return Err(GraphError::Value {
                value: name,
                reason: format!("{} values for {ty}", values.len()),
            });
        }
        let data = encode_elements(ty.dtype, values);
        self.constant(name, ty, data)
    }

    /// A value added so far.
    pub fn value(&self, id: ValueId) -> &Value {
        self.graph.value(id)
    }

    /// The type of a value added so far.
    pub fn ty(&self, id: ValueId) -> &TensorType {
        &self.graph.value(id).ty
    }

    /// Adds an operation whose output value (and the operation) is called `name`; the output
    /// type is inferred. Errors name the operation and operand.
    pub fn op(
        &mut self,
        name: impl Into<String>,
        kind: OpKind,
        inputs: &[ValueId],
    ) -> Result<ValueId, GraphError> {
        let name = name.into();
        let mut types = Vec::with_capacity(inputs.len());
        for (n, &i) in inputs.iter().enumerate() {
            match self.graph.values.get(i.0 as usize) {
                Some(v) => types.push(&v.ty),
                None => {
                    return Err(GraphError::Operation {
                        operation: name,
                        mnemonic: kind.mnemonic(),
                        operand: Some(format!("#{n}")),
                        reason: format!("unknown value {i}"),
                    });
                }
            }
        }
        let ty = infer(&kind, &types).map_err(|e| GraphError::Operation {
            operation: name.clone(),
            mnemonic: kind.mnemonic(),
            operand: e
                .operand
                .map(|n| format!("#{n} %{}", self.graph.values[inputs[n].0 as usize].name)),
            reason: e.reason,
        })?;
        let op_id = OperationId(self.graph.operations.len() as u32);
        let id = ValueId(self.graph.values.len() as u32);
        self.graph.values.push(Value {
            name: name.clone(),
            ty,
            producer: Some(op_id),
        });
        self.graph.operations.push(Operation {
            name,
            kind,
            inputs: inputs.to_vec(),
            outputs: vec![id],
        });
        Ok(id)
    }

    /// `matmul(a, b)` with the given partials; the output dtype is `out`.
    pub fn matmul(
        &mut self,
        name: &str,
        a: ValueId,
        b: ValueId,
        partials: DType,
        out: DType,
    ) -> Result<ValueId, GraphError> {
        self.op(name, OpKind::MatMul { partials, out }, &[a, b])
    }

    /// `cast(x)` to `to`.
    pub fn cast(&mut self, name: &str, x: ValueId, to: DType) -> Result<ValueId, GraphError> {
        self.op(name, OpKind::cast(to), &[x])
    }

    /// Marks a value as a graph output.
    pub fn output(&mut self, id: ValueId) {
        self.graph.outputs.push(id);
    }

    /// Verifies and returns the graph.
    pub fn finish(self) -> Result<Graph, GraphError> {
        self.graph.verify()?;
        Ok(self.graph)
    }

    /// Returns the graph without verifying it (for tests of the verifier and for the parser,
    /// which reports positions itself).
    pub fn finish_unverified(self) -> Graph {
        self.graph
    }

    /// The constants added so far, for tests of the verifier.
    #[doc(hidden)]
    pub fn constants_mut(&mut self) -> &mut Vec<Constant> {
        &mut self.graph.constants
    }

    /// Direct access for tests that need to corrupt a graph.
    #[doc(hidden)]
    pub fn graph_mut(&mut self) -> &mut Graph {
        &mut self.graph
    }
}

#[doc(hidden)]
impl Graph {
    /// Mutable access to values and operations for verifier tests.
    pub fn parts_mut(
        &mut self,
    ) -> (
        &mut Vec<Value>,
        &mut Vec<Operation>,
        &mut Vec<ValueId>,
        &mut Vec<ValueId>,
    ) {
        (
            &mut self.values,
            &mut self.operations,
            &mut self.inputs,
            &mut self.outputs,
        )
    }
}
