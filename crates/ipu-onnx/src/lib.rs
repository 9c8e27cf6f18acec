//! Import of ONNX models into the graph IR of `ipu-graph`.
//!
//! [`import`] decodes a `ModelProto` (protobuf bindings generated from the onnx package's
//! `onnx.proto`, see [`proto`]), binds symbolic input dimensions from
//! [`ImportOptions::dims`], turns initializers and `Constant` nodes into known tensors, folds
//! every node whose inputs are all known (shape subgraphs: `Shape → Gather → Unsqueeze →
//! Concat → Reshape`, casts and integer arithmetic), and maps every other node onto graph
//! operations; known tensors that reach an operation as data become graph constants. The
//! result is verified, and the same bytes always give the same graph.
//!
//! The importer is sans-IO: external-data initializers are read through the caller's
//! [`ImportOptions::external_data`] loader.
//!
//! Architecture invariant: every refusal is an [`OnnxError`] naming the node, tensor or input
//! concerned; no input bytes make the importer panic. Operators are documented in their
//! family's module under `ops/` (one table entry each) with the ONNX operator specification
//! (onnx/docs/Operators.md) they follow.

mod error;
mod import;
mod importer;
mod known;
mod ops;
mod options;
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    rustdoc::bare_urls,
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags
)]
pub mod proto;
mod tensor;

pub use error::OnnxError;
pub use import::{Imported, OPSET_MAX, OPSET_MIN, import};
pub use known::FOLDED_ELEMENTS_MAX;
pub use options::{ExternalData, ExternalDataLoader, ImportOptions};
pub use tensor::{TensorData, decode_tensor};
