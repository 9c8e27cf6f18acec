//! Storage-order conversion of host tensors: round trips and agreement with
//! `ipu_package::storage_index`, for every dtype, shapes with odd column counts and groups.

use ipu_package::{HostTensor, TensorRole, storage_elements, storage_index};
use ipu_runtime::RuntimeError;
use ipu_runtime::layout::{dense_to_storage, element_bytes, storage_to_dense};
use proptest::prelude::*;

fn tensor(shape: Vec<usize>, group: usize, dtype: &str) -> HostTensor {
    let bytes = (storage_elements(&shape, group) * element_bytes(dtype).unwrap()) as u64;
    HostTensor {
        name: "t".into(),
        role: TensorRole::Input,
        dtype: dtype.into(),
        scale: 0,
        shape,
        group,
        page: 0,
        offset: 0,
        bytes,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn dense_round_trips_through_storage_order(
        shape in prop::collection::vec(1usize..12, 0..4),
        group in prop::sample::select(vec![4usize, 8, 12, 16, 32]),
        dtype in prop::sample::select(vec!["f32", "f16", "f143", "f152"]),
        seed in any::<u64>(),
    ) {
        let t = tensor(shape.clone(), group, dtype);
        let eb = element_bytes(dtype).unwrap();
        let n: usize = shape.iter().product();
        let dense: Vec<u8> = (0..n * eb)
            .map(|i| (seed.wrapping_mul(6364136223846793005).wrapping_add((i as u64).wrapping_mul(1442695040888963407)) >> 56) as u8)
            .collect();
        let storage = dense_to_storage(&t, &dense).unwrap();
        prop_assert_eq!(storage.len() as u64, t.bytes);
        // Every element lands where storage_index says; everything else is zero padding.
        let mut covered = vec![false; storage.len() / eb];
        for i in 0..n {
            let s = storage_index(&shape, group, i);
            prop_assert_eq!(&storage[s * eb..(s + 1) * eb], &dense[i * eb..(i + 1) * eb]);
            covered[s] = true;
        }
        for (s, c) in covered.iter().enumerate() {
            if !c {
                prop_assert!(storage[s * eb..(s + 1) * eb].iter().all(|&b| b == 0));
            }
        }
        prop_assert_eq!(storage_to_dense(&t, &storage).unwrap(), dense);
    }
}

#[test]
fn wrong_sizes_are_refused() {
    let t = tensor(vec![3, 5], 4, "f16");
    let e = dense_to_storage(&t, &[0; 29]).unwrap_err();
    assert_eq!(e.to_string(), "tensor \"t\": expected 30 bytes, given 29");
    // Storage is in column groups of 4: 2 groups x 3 rows x 4 columns x 2 bytes.
    let e = storage_to_dense(&t, &[0; 30]).unwrap_err();
    assert!(matches!(e, RuntimeError::TensorLayout { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "tensor \"t\": 30 bytes of storage given, 48 expected"
    );
    let mut bad = t.clone();
    bad.bytes += 2;
    let e = dense_to_storage(&bad, &[0; 30]).unwrap_err();
    assert!(matches!(e, RuntimeError::TensorLayout { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "tensor \"t\": storage order of shape [3, 5] with group 4 needs 48 bytes, the package \
         records 50"
    );
    let mut bad = t;
    bad.group = 6;
    let e = dense_to_storage(&bad, &[0; 30]).unwrap_err();
    assert!(matches!(e, RuntimeError::TensorLayout { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "tensor \"t\": column group 6 is not a positive multiple of 4"
    );
}
