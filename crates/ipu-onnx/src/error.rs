//! The one error type of the importer: what is wrong and where, in the model's own names.

/// Why a model cannot be imported. Every variant names the node, tensor, input or attribute
/// concerned, in the model's own (unsanitised) names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OnnxError {
    /// The bytes are not a well-formed ONNX model: truncated or invalid protobuf, missing graph
    /// or opset, a tensor whose data does not match its shape, a name used before it is
    /// defined.
    #[error("malformed ONNX model: {reason}")]
    Malformed {
        /// What is wrong.
        reason: String,
    },
    /// The model imports a newer opset than the importer knows.
    #[error("the model uses opset {version} of domain `{domain}`; the newest supported is {max}")]
    OpsetTooNew {
        /// Domain (`ai.onnx` for the default one).
        domain: String,
        /// The model's opset version.
        version: i64,
        /// The newest supported version.
        max: i64,
    },
    /// The model imports an older opset than the importer knows.
    #[error("the model uses opset {version} of domain `{domain}`; the oldest supported is {min}")]
    OpsetTooOld {
        /// Domain (`ai.onnx` for the default one).
        domain: String,
        /// The model's opset version.
        version: i64,
        /// The oldest supported version.
        min: i64,
    },
    /// A node's operator has no mapping to the graph IR.
    #[error("node `{node}`: operator {op_type} (domain `{domain}`) is not supported: {reason}")]
    UnsupportedOperator {
        /// Node name (`#index` when the node has none).
        node: String,
        /// Operator type.
        op_type: String,
        /// Operator domain (`ai.onnx` for the default one).
        domain: String,
        /// Why: the missing device operator, or that the operator is unknown.
        reason: String,
    },
    /// A node's attribute has a value (or is an attribute) the mapping does not handle.
    #[error("node `{node}` ({op_type}): attribute `{attribute}`: {reason}")]
    UnsupportedAttribute {
        /// Node name.
        node: String,
        /// Operator type.
        op_type: String,
        /// Attribute name.
        attribute: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A node's input is of a kind the mapping does not handle (computed at run time where a
    /// constant is needed, an integer tensor used as data, an unsupported value).
    #[error("node `{node}` ({op_type}): input `{input}`: {reason}")]
    UnsupportedInput {
        /// Node name.
        node: String,
        /// Operator type.
        op_type: String,
        /// Input tensor name.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor's element type has no graph dtype (or a sparse tensor).
    #[error("tensor `{tensor}`: element type {data_type} is not supported: {reason}")]
    UnsupportedType {
        /// Tensor name.
        tensor: String,
        /// The ONNX element type's name.
        data_type: String,
        /// Why.
        reason: String,
    },
    /// A graph input has a symbolic dimension that no `--dim` binds.
    #[error("input `{input}`: dimension `{dim}` is symbolic; bind it with --dim {dim}=VALUE")]
    UnboundDimension {
        /// Input name.
        input: String,
        /// The dimension's name.
        dim: String,
    },
    /// A graph input has a dimension with neither a size nor a name.
    #[error("input `{input}`: dimension {axis} has neither a size nor a name")]
    UnnamedDimension {
        /// Input name.
        input: String,
        /// The axis.
        axis: usize,
    },
    /// A `--dim` binding names no symbolic dimension of the model's inputs.
    #[error("--dim {dim}: no input of the model has a dimension named `{dim}`")]
    UnusedDimension {
        /// The binding's name.
        dim: String,
    },
    /// A dimension the model declares differs from the one the import computes (for example a
    /// `--dim` that contradicts a fixed output dimension), or a binding of size 0.
    #[error("tensor `{tensor}`: dimension {axis} is declared {declared} but is {actual}")]
    DimensionMismatch {
        /// Tensor name.
        tensor: String,
        /// The axis.
        axis: usize,
        /// The declared size or name (with its binding).
        declared: String,
        /// The size the import computed or was given.
        actual: usize,
    },
    /// A tensor's external data could not be read.
    #[error("tensor `{tensor}`: external data `{location}`: {reason}")]
    MissingExternalData {
        /// Tensor name.
        tensor: String,
        /// The `location` of the external data.
        location: String,
        /// Why it could not be had.
        reason: String,
    },
    /// The graph IR refused the operation a node maps to (shapes that do not broadcast, an
    /// axis out of range, dtypes that differ).
    #[error("node `{node}` ({op_type}): {reason}")]
    Graph {
        /// Node name.
        node: String,
        /// Operator type.
        op_type: String,
        /// The graph IR's reason.
        reason: String,
    },
}
