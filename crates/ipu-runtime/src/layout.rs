//! Conversion between the dense row-major tensors the user sees and the storage order of a
//! host tensor in its page (see `ipu_package::storage_index` and `docs/package-format.md`):
//! `[.., R, C]` is stored as `[.., ceil(C / group), R, group]`, the columns past `C` zero.

use ipu_package::{HostTensor, split_shape, storage_elements};

use crate::RuntimeError;

pub use ipu_package::element_bytes;

/// The sizes of one host tensor, checked against each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorSizes {
    /// Bytes per element.
    pub element_bytes: usize,
    /// Bytes of the dense row-major tensor.
    pub dense_bytes: usize,
    /// Bytes of the tensor in storage order (padding included).
    pub storage_bytes: usize,
}

/// The sizes of `tensor`; an error if its dtype is unknown, its group is not a positive
/// multiple of 4, or its recorded byte count differs from its storage size.
pub fn tensor_sizes(tensor: &HostTensor) -> Result<TensorSizes, RuntimeError> {
    let layout = |reason: String| RuntimeError::TensorLayout {
        name: tensor.name.clone(),
        reason,
    };
    let element_bytes = element_bytes(&tensor.dtype)
        .ok_or_else(|| layout(format!("unknown dtype {:?}", tensor.dtype)))?;
    if tensor.group == 0 || !tensor.group.is_multiple_of(4) {
        return Err(layout(format!(
            "column group {} is not a positive multiple of 4",
            tensor.group
        )));
    }
    let elements = tensor
        .shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| layout(format!("shape {:?} overflows", tensor.shape)))?;
    let dense_bytes = elements * element_bytes;
    let storage_bytes = storage_elements(&tensor.shape, tensor.group) * element_bytes;
    if storage_bytes as u64 != tensor.bytes {
        return Err(layout(format!(
            "storage order of shape {:?} with group {} needs {storage_bytes} bytes, the package \
             records {}",
            tensor.shape, tensor.group, tensor.bytes
        )));
    }
    Ok(TensorSizes {
        element_bytes,
        dense_bytes,
        storage_bytes,
    })
}

/// Calls `f(dense_offset, storage_offset, bytes)` for every contiguous run (a row's part in one
/// column group) of `tensor`, whose `sizes` are checked, in bytes; nothing for an empty tensor.
fn for_each_run(tensor: &HostTensor, sizes: &TensorSizes, mut f: impl FnMut(usize, usize, usize)) {
    if sizes.dense_bytes == 0 {
        return;
    }
    let (group, element_bytes) = (tensor.group, sizes.element_bytes);
    let (outer, rows, cols) = split_shape(&tensor.shape);
    let groups = cols.div_ceil(group);
    let per_outer = groups * rows * group;
    for o in 0..outer {
        for g in 0..groups {
            let c0 = g * group;
            let width = group.min(cols - c0);
            for r in 0..rows {
                let dense = (o * rows + r) * cols + c0;
                let storage = o * per_outer + g * rows * group + r * group;
                f(
                    dense * element_bytes,
                    storage * element_bytes,
                    width * element_bytes,
                );
            }
        }
    }
}

/// Converts a dense row-major tensor into its storage order, padding with zeros.
pub fn dense_to_storage(tensor: &HostTensor, dense: &[u8]) -> Result<Vec<u8>, RuntimeError> {
    let sizes = tensor_sizes(tensor)?;
    if dense.len() != sizes.dense_bytes {
        return Err(RuntimeError::TensorSize {
            name: tensor.name.clone(),
            expected_bytes: sizes.dense_bytes as u64,
            given_bytes: dense.len() as u64,
        });
    }
    let mut out = vec![0u8; sizes.storage_bytes];
    for_each_run(tensor, &sizes, |d, s, n| {
        out[s..s + n].copy_from_slice(&dense[d..d + n]);
    });
    Ok(out)
}

/// Converts a tensor in storage order back to dense row-major, dropping the padding.
pub fn storage_to_dense(tensor: &HostTensor, storage: &[u8]) -> Result<Vec<u8>, RuntimeError> {
    let sizes = tensor_sizes(tensor)?;
    if storage.len() != sizes.storage_bytes {
        return Err(RuntimeError::TensorLayout {
            name: tensor.name.clone(),
            reason: format!(
                "{} bytes of storage given, {} expected",
                storage.len(),
                sizes.storage_bytes
            ),
        });
    }
    let mut out = vec![0u8; sizes.dense_bytes];
    for_each_run(tensor, &sizes, |d, s, n| {
        out[d..d + n].copy_from_slice(&storage[s..s + n]);
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipu_package::{TensorRole, storage_index};

    fn tensor(shape: &[usize], group: usize, dtype: &str) -> HostTensor {
        let eb = element_bytes(dtype).unwrap();
        HostTensor {
            name: "t".into(),
            role: TensorRole::Input,
            dtype: dtype.into(),
            scale: 0,
            shape: shape.to_vec(),
            group,
            page: 0,
            offset: 0,
            bytes: (storage_elements(shape, group) * eb) as u64,
        }
    }

    #[test]
    fn conversion_agrees_with_storage_index() {
        for (shape, group) in [
            (vec![], 4),
            (vec![7], 4),
            (vec![3, 5], 4),
            (vec![2, 3, 20], 16),
            (vec![4, 1], 8),
        ] {
            let t = tensor(&shape, group, "f16");
            let n: usize = shape.iter().product();
            let dense: Vec<u8> = (0..n * 2).map(|i| (i % 251) as u8 + 1).collect();
            let storage = dense_to_storage(&t, &dense).unwrap();
            for i in 0..n {
                let s = storage_index(&shape, group, i);
                assert_eq!(
                    storage[2 * s..2 * s + 2],
                    dense[2 * i..2 * i + 2],
                    "{shape:?} {i}"
                );
            }
            let filled = n * 2;
            let nonzero = storage.iter().filter(|&&b| b != 0).count();
            assert_eq!(nonzero, filled, "padding must be zero for {shape:?}");
        }
    }
}
