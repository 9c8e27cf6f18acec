//! The operator plan: what planning makes and lowering reads. Device values with their
//! layouts, device operations with their mappings, and the finalists the planner kept. Each
//! device operation holds its family's operation (`ops`) by a handle, [`DevOpKind`], through
//! which the core asks what it needs (`FamilyOp`): this module, the planner, the lowerer,
//! the costing and the build name no family's types.

use std::any::Any;
use std::fmt;

use ipu_graph::{DType, ValueId};
use ipu_target::AmpMode;

use crate::error::CodegenError;
use crate::layout::Layout;
use crate::lower::Lowerer;

/// A value on the device: a graph value or one the expansion introduces.
#[derive(Debug, Clone, PartialEq)]
pub struct DevValue {
    /// Name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Logical shape.
    pub shape: Vec<usize>,
    /// The graph value it is, if any.
    pub graph: Option<ValueId>,
    /// Where it lives.
    pub layout: Layout,
    /// The user's value or operation it belongs to (`%name`): a graph input, or the graph
    /// operation whose planning made it. Errors and the tile program name this, never an
    /// intermediate.
    pub origin: String,
}

/// Index of a [`DevValue`].
pub type DevValueId = usize;

/// What the core asks of a family's device operation, which the plan holds by a handle
/// ([`DevOpKind`]) so that the planner and the lowerer never name a family's types. A family's
/// operation type (e.g. the matmul's blocks, a row operation, a flash attention's mapping)
/// implements it beside its lowering; [`FamilyOpValue`] gives every `Clone + PartialEq` type
/// the rest.
pub(crate) trait FamilyOp: FamilyOpValue + fmt::Debug + Send + Sync {
    /// Lowers device operation `index` of the lowerer's plan, which holds this operation, into
    /// the lowerer's program: its exchange and compute steps (most families through
    /// [`Lowerer::lower_steps`]).
    fn lower(&self, lowerer: &mut Lowerer<'_>, index: usize) -> Result<(), CodegenError>;

    /// Chunks of k the operation computes on separate tiles, their partials summed by later
    /// operations (a matmul's 3-D split, which the build reports: the reference's device
    /// precision follows it); 1 for any other operation.
    fn k_splits(&self) -> usize {
        1
    }

    /// The multiply-accumulates of the operation's matrix products and the AMP mode they run
    /// in, for efficiency figures, given the device operation `op` that holds it and the
    /// plan's `values`; `None` when it runs no product.
    fn macs(&self, op: &DevOp, values: &[DevValue]) -> Option<(u64, AmpMode)> {
        let _ = (op, values);
        None
    }
}

/// What a plan needs of a family's operation as a value: a copy (plans are cloned) and a
/// comparison with another plan's operation. Implemented for every family operation that is
/// `Clone + PartialEq`.
pub(crate) trait FamilyOpValue: Any {
    /// A boxed copy.
    fn clone_box(&self) -> Box<dyn FamilyOp>;
    /// Whether `other` is an operation of the same type, equal to this one.
    fn eq_dyn(&self, other: &dyn FamilyOp) -> bool;
}

impl<T: FamilyOp + Clone + PartialEq> FamilyOpValue for T {
    fn clone_box(&self) -> Box<dyn FamilyOp> {
        Box::new(self.clone())
    }

    fn eq_dyn(&self, other: &dyn FamilyOp) -> bool {
        (other as &dyn Any).downcast_ref::<T>() == Some(self)
    }
}

/// What a device operation does: a handle on its family's operation, which implements
/// `FamilyOp`. `Debug` shows the family's operation.
pub struct DevOpKind(Box<dyn FamilyOp>);

impl DevOpKind {
    /// The handle of a family's operation.
    pub(crate) fn new(op: impl FamilyOp) -> DevOpKind {
        DevOpKind(Box::new(op))
    }

    /// The family's operation, if it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        (&*self.0 as &dyn Any).downcast_ref()
    }

    /// See [`FamilyOp::lower`].
    pub(crate) fn lower(
        &self,
        lowerer: &mut Lowerer<'_>,
        index: usize,
    ) -> Result<(), CodegenError> {
        self.0.lower(lowerer, index)
    }

    /// Chunks of k the operation computes on separate tiles (`FamilyOp::k_splits`).
    pub fn k_splits(&self) -> usize {
        self.0.k_splits()
    }

    /// The multiply-accumulates of the operation's matrix products and their AMP mode
    /// (`FamilyOp::macs`).
    pub fn macs(&self, op: &DevOp, values: &[DevValue]) -> Option<(u64, AmpMode)> {
        self.0.macs(op, values)
    }
}

impl Clone for DevOpKind {
    fn clone(&self) -> DevOpKind {
        DevOpKind(self.0.clone_box())
    }
}

impl PartialEq for DevOpKind {
    fn eq(&self, other: &DevOpKind) -> bool {
        self.0.eq_dyn(&*other.0)
    }
}

impl fmt::Debug for DevOpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A device operation.
#[derive(Debug, Clone, PartialEq)]
pub struct DevOp {
    /// Name (the graph operation's, with a suffix for expansions).
    pub name: String,
    /// The graph operation it belongs to (`%name`).
    pub origin: String,
    /// Kind.
    pub kind: DevOpKind,
    /// Operands.
    pub inputs: Vec<DevValueId>,
    /// Result.
    pub output: DevValueId,
    /// Estimated cycles (compute and exchange).
    pub estimated_cycles: u64,
    /// Estimated exchange cycles.
    pub estimated_exchange_cycles: u64,
}

/// A candidate mapping with its figures, for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Finalist {
    /// Operation.
    pub op: String,
    /// Description of the mapping.
    pub mapping: String,
    /// Estimated cycles.
    pub estimated_cycles: u64,
    /// Estimated exchange cycles.
    pub estimated_exchange_cycles: u64,
    /// Peak bytes per tile.
    pub peak_tile_bytes: u64,
    /// Tiles used.
    pub tiles: u32,
    /// Candidate mappings the operation had (1: its layout follows its operands).
    pub alternatives: usize,
}

/// The result of planning.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorPlan {
    /// Device values; graph inputs first, in graph order.
    pub values: Vec<DevValue>,
    /// Device operations in execution order.
    pub ops: Vec<DevOp>,
    /// Device values of the graph's outputs.
    pub outputs: Vec<DevValueId>,
    /// Device values of the graph's inputs.
    pub inputs: Vec<DevValueId>,
    /// Device values of the graph's constants, with their data (row-major, the element
    /// type's bytes).
    pub constants: Vec<(DevValueId, ipu_graph::ConstantData)>,
    /// Retained finalists per operation.
    pub finalists: Vec<Finalist>,
    /// Sum of the operations' estimates.
    pub estimated_cycles: u64,
    /// Sum of the operations' exchange estimates.
    pub estimated_exchange_cycles: u64,
    /// Tiles used.
    pub tiles_used: u32,
}

impl OperatorPlan {
    /// The multiply-accumulates of the plan's matrix products (flash attention's two products
    /// over the (query, key) pairs attention needs: a causal mask hides half of them, whatever
    /// the mapping computes), and the AMP mode they run in, for efficiency figures.
    pub fn macs(&self) -> (u64, Option<AmpMode>) {
        let mut macs = 0u64;
        let mut mode_used = None;
        for op in &self.ops {
            if let Some((m, mode)) = op.kind.macs(op, &self.values) {
                macs += m;
                mode_used = Some(mode);
            }
        }
        (macs, mode_used)
    }
}

/// The name of a dtype in the package manifest.
pub fn dtype_name(d: DType) -> &'static str {
    d.text_name()
}

/// A constant that differs between the layers of a repeated block (`crate::repeat`): its device value (the frame the block reads)
/// and each layer's name and data.
#[derive(Debug, Clone)]
pub struct DevFrame {
    /// The frame.
    pub value: DevValueId,
    /// Each layer's constant's name.
    pub names: Vec<String>,
    /// Each layer's data (row-major, as the graph holds it).
    pub data: Vec<ipu_graph::ConstantData>,
}

/// A run of identical layers in a plan.
#[derive(Debug, Clone)]
pub struct DevRepeat {
    /// Layers.
    pub count: usize,
    /// The block's device operations.
    pub ops: std::ops::Range<usize>,
    /// The value the block reads from the layer before.
    pub input: DevValueId,
    /// The block's result, which the next layer reads as its input.
    pub output: DevValueId,
    /// The constants that differ between layers.
    pub frames: Vec<DevFrame>,
    /// The names of the graph's outputs as the user's graph has them.
    pub outputs: Vec<String>,
}

impl DevRepeat {
    /// Whether `v` is a frame (its data go to the layers' own buffers, not to the frame).
    pub fn is_frame(&self, v: DevValueId) -> bool {
        self.frames.iter().any(|f| f.value == v)
    }
}
