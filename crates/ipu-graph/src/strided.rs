//! Row-major strides and strided walks over a shape: the index arithmetic the host reference
//! and the ONNX importer's evaluation of known tensors share (broadcasts, transposes,
//! batched products).

/// Row-major strides of `shape`, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// NumPy's broadcast of two shapes (aligned from the right), if they broadcast.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = (i + a.len()).checked_sub(r).map_or(1, |j| a[j]);
            let db = (i + b.len()).checked_sub(r).map_or(1, |j| b[j]);
            match (da, db) {
                _ if da == db => Some(da),
                (1, _) => Some(db),
                (_, 1) => Some(da),
                _ => None,
            }
        })
        .collect()
}

/// Strides of a tensor of `shape` read as the broadcast shape `out` (numpy rules: `shape` is
/// aligned to the right; a missing or size-1 axis that `out` widens gets stride 0).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let s = strides(shape);
    let pad = out.len() - shape.len();
    (0..out.len())
        .map(|i| {
            if i < pad || shape[i - pad] != out[i] {
                0
            } else {
                s[i - pad]
            }
        })
        .collect()
}

/// Calls `f(index, offsets)` for every element of `shape` in row-major order: `index` counts
/// the elements from 0 and `offsets[t]` is the element's offset under `strides[t]`. Nothing is
/// called for an empty shape.
pub fn walk<const T: usize>(
    shape: &[usize],
    strides: [&[usize]; T],
    mut f: impl FnMut(usize, [usize; T]),
) {
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    let mut off = [0usize; T];
    for linear in 0..n {
        f(linear, off);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            for t in 0..T {
                off[t] += strides[t][d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for t in 0..T {
                off[t] -= strides[t][d] * shape[d];
            }
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_a_transpose_and_a_broadcast() {
        let mut seen = Vec::new();
        // [2, 3] read through the strides of its transpose.
        walk(&[3, 2], [&[1, 3]], |i, [o]| seen.push((i, o)));
        assert_eq!(seen, [(0, 0), (1, 3), (2, 1), (3, 4), (4, 2), (5, 5)]);
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), [0, 1, 0]);
        assert_eq!(strides(&[2, 3, 4]), [12, 4, 1]);
    }
}
