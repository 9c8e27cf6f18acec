//! What the caller supplies to an import: `--dim` bindings and the reader of external data.

use std::collections::BTreeMap;

/// A request for external data: `length` bytes (to the end when `None`) at `offset` of the
/// file `location`, relative to the model's directory (the importer has checked that it has
/// no `..` component and no root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExternalData<'a> {
    /// The file, relative to the model's directory.
    pub location: &'a str,
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes to read; `None` reads to the end of the file.
    pub length: Option<u64>,
}

/// The caller's reader of external data: the bytes, or why they cannot be had.
pub type ExternalDataLoader<'a> = dyn Fn(&ExternalData<'_>) -> Result<Vec<u8>, String> + 'a;

/// What the caller supplies to [`import`](crate::import()).
#[derive(Clone, Default)]
pub struct ImportOptions<'a> {
    /// Sizes of symbolic input dimensions (`--dim batch=4`); each must name a dimension of
    /// an input.
    pub dims: BTreeMap<String, usize>,
    /// Reader of external-data initializers; without one such a model is refused.
    pub external_data: Option<&'a ExternalDataLoader<'a>>,
}

impl std::fmt::Debug for ImportOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportOptions")
            .field("dims", &self.dims)
            .field("external_data", &self.external_data.map(|_| "loader"))
            .finish()
    }
}
