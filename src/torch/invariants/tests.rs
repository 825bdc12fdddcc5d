use super::*;
use crate::limits::Limits;
use crate::torch::tensor::{Dims, TensorNode};

/// Storages in memory, by index.
struct Mem(Vec<Vec<u8>>);

impl<'d> StorageBytes<'d> for Mem {
    fn read(&mut self, id: StorageId, start: u64, len: u64) -> Result<Cow<'d, [u8]>, Error> {
        let bytes = &self.0[id.index()];
        Ok(Cow::Owned(
            bytes[start as usize..(start + len) as usize].to_vec(),
        ))
    }
}

struct File {
    arena: Arena,
    mem: Vec<Vec<u8>>,
}

fn bytes_of(dtype: DType, values: &[i64]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| match dtype {
            DType::Int64 => v.to_ne_bytes().to_vec(),
            DType::Int32 => (*v as i32).to_ne_bytes().to_vec(),
            DType::Int16 => (*v as i16).to_ne_bytes().to_vec(),
            DType::UInt8 | DType::Bool | DType::QInt8 => vec![*v as u8],
            DType::Float32 => (*v as f32).to_ne_bytes().to_vec(),
            DType::Float64 => (*v as f64).to_ne_bytes().to_vec(),
            other => panic!("no test values for {other:?}"),
        })
        .collect()
}

fn contiguous(shape: &[u64]) -> Vec<u64> {
    let mut stride = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        stride[i] = stride[i + 1] * shape[i + 1].max(1);
    }
    stride
}

impl File {
    fn new() -> File {
        File {
            arena: Arena::new(&Limits::default()),
            mem: Vec::new(),
        }
    }

    /// A strided view of a new storage holding `values`.
    fn view(
        &mut self,
        dtype: DType,
        values: &[i64],
        offset: u64,
        shape: &[u64],
        stride: &[u64],
    ) -> NodeId {
        self.mem.push(bytes_of(dtype, values));
        let dense = Dense {
            storage: StorageId(self.mem.len() as u32 - 1),
            dtype,
            offset,
            shape: shape.into(),
            stride: stride.into(),
        };
        self.arena
            .push_tensor(TensorNode::new(TensorKind::Dense(dense), false))
            .unwrap()
    }

    fn tensor(&mut self, dtype: DType, values: &[i64], shape: &[u64]) -> NodeId {
        self.view(dtype, values, 0, shape, &contiguous(shape))
    }

    fn i64s(&mut self, values: &[i64], shape: &[u64]) -> NodeId {
        self.tensor(DType::Int64, values, shape)
    }

    /// `n` float values of shape `shape` (leading `n`).
    fn values(&mut self, shape: &[u64]) -> NodeId {
        let n: u64 = shape.iter().product();
        self.tensor(DType::Float32, &vec![1; n as usize], shape)
    }

    fn sparse(
        &mut self,
        layout: Layout,
        parts: &[NodeId],
        size: &[u64],
        coalesced: Option<bool>,
    ) {
        let node = TensorNode::new(
            TensorKind::Sparse {
                layout,
                parts: parts.into(),
                size: size.into(),
                coalesced,
            },
            false,
        );
        self.arena.push_tensor_to_check(node, 7).unwrap();
    }

    fn check(self) -> Result<(), Error> {
        self.check_with_budget(u64::MAX, u64::MAX)
    }

    fn check_with_budget(self, max_read: u64, data_bytes: u64) -> Result<(), Error> {
        let budget = Budget {
            max_read,
            data_bytes,
        };
        check(&self.arena, &mut Mem(self.mem), budget, "archive/data.pkl")
    }
}

fn message(r: Result<(), Error>) -> String {
    match r {
        Ok(()) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

/// A COO tensor of `indices` (sparse_dim x nnz, int64) with float values.
fn coo(indices: &[&[i64]], size: &[u64], coalesced: Option<bool>) -> Result<(), Error> {
    let mut f = File::new();
    let nnz = indices.first().map_or(0, |r| r.len()) as u64;
    let flat: Vec<i64> = indices.iter().flat_map(|r| r.iter().copied()).collect();
    let i = f.i64s(&flat, &[indices.len() as u64, nnz]);
    let v = f.values(&[nnz]);
    f.sparse(Layout::SparseCoo, &[i, v], size, coalesced);
    f.check()
}

#[test]
fn coo_indices_must_lie_inside_the_size() {
    coo(&[&[0, 2, 1]], &[3], None).unwrap();
    coo(&[&[0, 1], &[4, 0]], &[2, 5], None).unwrap();
    let e = message(coo(&[&[0, 3]], &[3], None));
    assert!(e.contains("for dim 0, size is 3 but found index 3"), "{e}");
    assert!(
        e.contains("archive/data.pkl") && e.contains("byte offset 7"),
        "{e}"
    );
    let e = message(coo(&[&[0, 1], &[0, -1]], &[2, 2], None));
    assert!(e.contains("found negative index -1 for dim 1"), "{e}");
    // No index at all: nothing to check, whatever the size.
    coo(&[&[], &[]], &[0, 0], None).unwrap();
}

#[test]
fn coo_shapes_must_agree() {
    let mut f = File::new();
    let i = f.i64s(&[0, 1], &[2]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
    assert!(message(f.check()).contains("sparse_dim x nnz"));

    let mut f = File::new();
    let i = f.i64s(&[0, 1, 2], &[1, 3]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
    assert!(message(f.check()).contains("same nnz"));

    let mut f = File::new();
    let i = f.i64s(&[0, 1], &[1, 2]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCoo, &[i, v], &[3, 3], None);
    assert!(message(f.check()).contains("sparse_dim + dense_dim"));

    let mut f = File::new();
    let i = f.i64s(&[0, 1], &[1, 2]);
    let v = f.values(&[2, 3]);
    f.sparse(Layout::SparseCoo, &[i, v], &[3, 4], None);
    assert!(message(f.check()).contains("values has incorrect size"));

    let mut f = File::new();
    let i = f.i64s(&[0, 1], &[1, 2]);
    let v = f.values(&[2, 3]);
    f.sparse(Layout::SparseCoo, &[i, v], &[3, 3], None);
    f.check().unwrap();

    // A 0-d value is one value.
    let mut f = File::new();
    let i = f.i64s(&[2], &[1, 1]);
    let v = f.values(&[]);
    f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
    f.check().unwrap();

    // No sparse dimension: the values are the tensor.
    let mut f = File::new();
    let i = f.i64s(&[], &[0, 2]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCoo, &[i, v], &[], None);
    f.check().unwrap();
}

#[test]
fn coo_sizes_must_fit_torchs_count() {
    let big = 1u64 << 62;
    assert!(message(coo(&[&[0], &[0]], &[big, 2], None)).contains("overflows"));
    coo(&[&[0], &[0]], &[big, 1], None).unwrap();
}

#[test]
fn coo_index_dtypes() {
    for (dtype, ok) in [
        (DType::Int32, true),
        (DType::Int16, true),
        (DType::UInt8, true),
        (DType::Float32, false),
    ] {
        let mut f = File::new();
        let i = f.tensor(dtype, &[0, 2], &[1, 2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
        assert_eq!(f.check().is_ok(), ok, "{dtype:?}");
    }
    // int32 indices are read as int32.
    let mut f = File::new();
    let i = f.tensor(DType::Int32, &[0, 3], &[1, 2]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
    assert!(message(f.check()).contains("found index 3"));
}

#[test]
fn coo_indices_are_read_through_their_strides() {
    // [[0, 1], [2, 3]] stored transposed after one unused element: the rows
    // are (0, 1) and (2, 3).
    let mut f = File::new();
    let i = f.view(DType::Int64, &[9, 0, 2, 1, 3], 1, &[2, 2], &[1, 2]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCoo, &[i, v], &[2, 4], None);
    f.check().unwrap();
    let mut f = File::new();
    let i = f.view(DType::Int64, &[9, 0, 2, 1, 3], 1, &[2, 2], &[1, 2]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCoo, &[i, v], &[2, 3], None);
    assert!(message(f.check()).contains("for dim 1, size is 3 but found index 3"));
}

#[test]
fn coalesced_coo_indices_must_be_sorted_and_distinct() {
    coo(&[&[0, 1, 1], &[2, 0, 1]], &[2, 3], Some(true)).unwrap();
    coo(&[&[1, 0]], &[3], Some(false)).unwrap();
    coo(&[&[1, 1]], &[3], None).unwrap();
    for indices in [
        &[&[1i64, 0][..]][..],
        &[&[1, 1]],
        &[&[0, 0], &[1, 1]],
        &[&[0, 0], &[2, 1]],
    ] {
        let e = message(coo(indices, &[3, 3][..indices.len()], Some(true)));
        assert!(e.contains("uncoalesced"), "{e}");
    }
}

#[test]
fn sparse_parts_must_be_strided_tensors() {
    let mut f = File::new();
    let i = f.i64s(&[0, 1], &[1, 2]);
    let meta = f
        .arena
        .push_tensor(TensorNode::new(
            TensorKind::Meta {
                dtype: DType::Float32,
                shape: Dims::from(&[2u64][..]),
                stride: Dims::from(&[1u64][..]),
            },
            false,
        ))
        .unwrap();
    f.sparse(Layout::SparseCoo, &[i, meta], &[3], None);
    assert!(message(f.check()).contains("got a meta tensor"));

    // Indices with a lazy negative bit hold other values than torch reads.
    let mut f = File::new();
    let mut neg = TensorNode::new(
        TensorKind::Dense(Dense {
            storage: StorageId(0),
            dtype: DType::Int64,
            offset: 0,
            shape: Dims::from(&[1u64, 1][..]),
            stride: Dims::from(&[1u64, 1][..]),
        }),
        false,
    );
    neg.neg = true;
    f.mem.push(bytes_of(DType::Int64, &[0]));
    let i = f.arena.push_tensor(neg).unwrap();
    let v = f.values(&[1]);
    f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
    assert!(message(f.check()).contains("lazy"));

    // A Parameter is its data.
    let mut f = File::new();
    let data = f.i64s(&[0, 1], &[1, 2]);
    let i = f
        .arena
        .push_tensor(TensorNode::new(
            TensorKind::Parameter { data, state: None },
            false,
        ))
        .unwrap();
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCoo, &[i, v], &[2], None);
    f.check().unwrap();
}

/// A compressed tensor over int64 (or int32) indices and float values of
/// shape `values`.
fn compressed(
    layout: Layout,
    dtype: DType,
    cidx: (&[i64], &[u64]),
    pidx: (&[i64], &[u64]),
    values: &[u64],
    size: &[u64],
) -> Result<(), Error> {
    let mut f = File::new();
    let c = f.tensor(dtype, cidx.0, cidx.1);
    let p = f.tensor(dtype, pidx.0, pidx.1);
    let v = f.values(values);
    f.sparse(layout, &[c, p, v], size, None);
    f.check()
}

fn csr(cidx: &[i64], pidx: &[i64], size: &[u64]) -> Result<(), Error> {
    let (nc, np) = (cidx.len() as u64, pidx.len() as u64);
    compressed(
        Layout::SparseCsr,
        DType::Int64,
        (cidx, &[nc]),
        (pidx, &[np]),
        &[np],
        size,
    )
}

#[test]
fn compressed_indices_start_at_0_end_at_nnz_and_never_decrease() {
    csr(&[0, 1, 2], &[0, 1], &[2, 2]).unwrap();
    csr(&[0, 0, 0], &[], &[2, 2]).unwrap();
    csr(&[0, 2, 2], &[0, 1], &[2, 2]).unwrap();
    assert!(message(csr(&[1, 1, 2], &[0, 1], &[2, 2])).contains("crow_indices[..., 0] == 0"));
    assert!(message(csr(&[0, 1, 1], &[0, 1], &[2, 2])).contains("crow_indices[..., -1] == nnz"));
    assert!(message(csr(&[1, 1, 1], &[], &[2, 2])).contains("[..., 0] == 0"));
    let e = message(csr(&[0, 2, 1, 2], &[0, 1], &[3, 2]));
    assert!(
        e.contains("crow_indices[..., 1:] - crow_indices[..., :-1] <= ncols"),
        "{e}"
    );
    // A row holds at most ncols entries.
    let e = message(csr(&[0, 3, 3], &[0, 0, 1], &[2, 2]));
    assert!(e.contains("<= ncols"), "{e}");
    // int32 indices that wrap around pass torch's own check, then crash it.
    let m = i64::from(i32::MAX);
    let e = message(compressed(
        Layout::SparseCsr,
        DType::Int32,
        (&[0, m, -m - 1, -1, 0], &[5]),
        (&[], &[0]),
        &[0],
        &[4, m as u64],
    ));
    assert!(e.contains("<= ncols"), "{e}");
}

#[test]
fn plain_indices_lie_in_range_sorted_and_distinct_within_a_row() {
    assert!(message(csr(&[0, 1, 2], &[0, 2], &[2, 2])).contains("0 <= col_indices < ncols"));
    assert!(message(csr(&[0, 1, 2], &[0, -1], &[2, 2])).contains("0 <= col_indices < ncols"));
    assert!(message(csr(&[0, 2, 2], &[1, 0], &[2, 2])).contains("sorted and distinct"));
    assert!(message(csr(&[0, 2, 2], &[1, 1], &[2, 2])).contains("sorted and distinct"));
    // Sorted within each row, not across rows.
    csr(&[0, 1, 2], &[1, 0], &[2, 2]).unwrap();
    // CSC: row indices against the rows.
    let ccol = |p: &[i64], size: &[u64]| {
        compressed(
            Layout::SparseCsc,
            DType::Int64,
            (&[0, 1, 2], &[3]),
            (p, &[2]),
            &[2],
            size,
        )
    };
    ccol(&[2, 0], &[3, 2]).unwrap();
    assert!(message(ccol(&[3, 0], &[3, 2])).contains("0 <= row_indices < nrows"));
}

#[test]
fn compressed_shapes_and_dtypes() {
    // Batched: each batch has its own rows.
    compressed(
        Layout::SparseCsr,
        DType::Int64,
        (&[0, 1, 2, 0, 0, 2], &[2, 3]),
        (&[0, 1, 0, 1], &[2, 2]),
        &[2, 2],
        &[2, 2, 2],
    )
    .unwrap();
    let e = message(compressed(
        Layout::SparseCsr,
        DType::Int64,
        (&[0, 1, 2, 0, 3, 2], &[2, 3]),
        (&[0, 1, 0, 1], &[2, 2]),
        &[2, 2],
        &[2, 2, 2],
    ));
    assert!(e.contains("<= ncols"), "{e}");
    // Blocks: values (nnz, 2, 2) over a 4 x 4 tensor of 2 x 2 blocks.
    compressed(
        Layout::SparseBsr,
        DType::Int64,
        (&[0, 1, 2], &[3]),
        (&[0, 1], &[2]),
        &[2, 2, 2],
        &[4, 4],
    )
    .unwrap();
    compressed(
        Layout::SparseBsc,
        DType::Int64,
        (&[0, 1, 2], &[3]),
        (&[0, 1], &[2]),
        &[2, 2, 3],
        &[4, 6],
    )
    .unwrap();
    let e = message(compressed(
        Layout::SparseBsr,
        DType::Int64,
        (&[0, 1, 2], &[3]),
        (&[0, 2], &[2]),
        &[2, 2, 2],
        &[4, 4],
    ));
    assert!(e.contains("0 <= col_indices < ncols"), "{e}");
    let e = message(compressed(
        Layout::SparseBsr,
        DType::Int64,
        (&[0, 1, 2], &[3]),
        (&[0, 1], &[2]),
        &[2, 2, 2],
        &[4, 5],
    ));
    assert!(e.contains("divisible"), "{e}");
    // int32 indices, one dtype for both, and only int32 or int64.
    compressed(
        Layout::SparseCsr,
        DType::Int32,
        (&[0, 1, 2], &[3]),
        (&[0, 1], &[2]),
        &[2],
        &[2, 2],
    )
    .unwrap();
    let e = message(compressed(
        Layout::SparseCsr,
        DType::Int16,
        (&[0, 1, 2], &[3]),
        (&[0, 1], &[2]),
        &[2],
        &[2, 2],
    ));
    assert!(e.contains("int32 or int64"), "{e}");
    let mut f = File::new();
    let c = f.tensor(DType::Int32, &[0, 1, 2], &[3]);
    let p = f.i64s(&[0, 1], &[2]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCsr, &[c, p, v], &[2, 2], None);
    assert!(message(f.check()).contains("same dtype"));
    // The plain dimension must fit the index dtype.
    let e = message(compressed(
        Layout::SparseCsr,
        DType::Int32,
        (&[0, 1, 2], &[3]),
        (&[0, 1], &[2]),
        &[2],
        &[2, 1 << 31],
    ));
    assert!(e.contains("32-bit integer overflow"), "{e}");
    // Shapes.
    assert!(message(csr(&[0, 1, 2, 2], &[0, 1], &[2, 2]))
        .contains("number of compressed dimensions + 1"));
    assert!(message(csr(&[0, 1, 2], &[0, 1], &[2])).contains("dimensionality must be sum"));
    let e = message(compressed(
        Layout::SparseCsr,
        DType::Int64,
        (&[0, 1, 2], &[3]),
        (&[0, 1], &[2]),
        &[3],
        &[2, 2],
    ));
    assert!(e.contains("must be equal to nnz"), "{e}");
    assert!(message(csr(&[0, 1, 2], &[0, 1], &[2, 1 << 62])).contains("overflows"));
    // Indices must be contiguous in their last dimension.
    let mut f = File::new();
    let c = f.view(DType::Int64, &[0, 9, 1, 9, 2], 0, &[3], &[2]);
    let p = f.i64s(&[0, 1], &[2]);
    let v = f.values(&[2]);
    f.sparse(Layout::SparseCsr, &[c, p, v], &[2, 2], None);
    assert!(message(f.check()).contains("contiguous tensor per batch"));
}

fn nested(
    buffer_len: u64,
    sizes: &[i64],
    strides: &[i64],
    offsets: &[i64],
    ndim: u64,
) -> Result<(), Error> {
    let mut f = File::new();
    let n = offsets.len() as u64;
    let b = f.values(&[buffer_len]);
    let s = f.i64s(sizes, &[n, ndim]);
    let st = f.i64s(strides, &[n, ndim]);
    let o = f.i64s(offsets, &[n]);
    let node = TensorNode::new(
        TensorKind::Nested {
            buffer: b,
            sizes: s,
            strides: st,
            offsets: o,
        },
        false,
    );
    f.arena.push_tensor_to_check(node, 0).unwrap();
    f.check()
}

#[test]
fn nested_components_lie_inside_their_buffer() {
    nested(10, &[2, 2, 1, 3], &[2, 1, 3, 1], &[0, 4], 2).unwrap();
    nested(10, &[2, 2, 2, 3], &[2, 1, 3, 1], &[0, 4], 2).unwrap();
    let e = message(nested(10, &[2, 2, 1, 3], &[2, 1, 3, 1], &[0, 8], 2));
    assert!(
        e.contains("component 1 needs 11 elements, the buffer has 10"),
        "{e}"
    );
    assert!(
        message(nested(10, &[2, 2, 1, 3], &[2, 1, 3, 1], &[0, -1], 2)).contains("negative")
    );
    assert!(
        message(nested(10, &[2, -2, 1, 3], &[2, 1, 3, 1], &[0, 4], 2)).contains("negative")
    );
    assert!(
        message(nested(10, &[2, 2, 1, 3], &[2, -1, 3, 1], &[0, 4], 2)).contains("negative")
    );
    // An empty component may start anywhere.
    nested(10, &[2, 0], &[1, 1], &[100], 2).unwrap();
    // No component at all.
    nested(10, &[], &[], &[], 2).unwrap();
    let e = message(nested(
        10,
        &[1 << 40, 1 << 40],
        &[1 << 40, 1 << 40],
        &[0],
        2,
    ));
    assert!(e.contains("needs") || e.contains("overflows"), "{e}");
}

#[test]
fn nested_metadata_shapes_and_dtypes() {
    let mut f = File::new();
    let b = f.values(&[10]);
    let s = f.tensor(DType::Int32, &[2, 2], &[1, 2]);
    let st = f.i64s(&[2, 1], &[1, 2]);
    let o = f.i64s(&[0], &[1]);
    let node = TensorNode::new(
        TensorKind::Nested {
            buffer: b,
            sizes: s,
            strides: st,
            offsets: o,
        },
        false,
    );
    f.arena.push_tensor_to_check(node, 0).unwrap();
    assert!(message(f.check()).contains("sizes must be int64"));

    let mut f = File::new();
    let b = f.values(&[10]);
    let s = f.i64s(&[2, 2], &[1, 2]);
    let st = f.i64s(&[2, 1], &[1, 2]);
    let o = f.i64s(&[0, 0], &[2]);
    let node = TensorNode::new(
        TensorKind::Nested {
            buffer: b,
            sizes: s,
            strides: st,
            offsets: o,
        },
        false,
    );
    f.arena.push_tensor_to_check(node, 0).unwrap();
    assert!(message(f.check()).contains("inconsistent metadata shapes"));

    let mut f = File::new();
    let b = f.values(&[2, 5]);
    let s = f.i64s(&[2, 2], &[1, 2]);
    let st = f.i64s(&[2, 1], &[1, 2]);
    let o = f.i64s(&[0], &[1]);
    let node = TensorNode::new(
        TensorKind::Nested {
            buffer: b,
            sizes: s,
            strides: st,
            offsets: o,
        },
        false,
    );
    f.arena.push_tensor_to_check(node, 0).unwrap();
    assert!(message(f.check()).contains("inconsistent metadata shapes"));

    // torch reads the metadata as flat arrays: a strided view of them is refused.
    let mut f = File::new();
    let b = f.values(&[10]);
    let s = f.view(DType::Int64, &[2, 9, 2], 0, &[1, 2], &[2, 2]);
    let st = f.i64s(&[2, 1], &[1, 2]);
    let o = f.i64s(&[0], &[1]);
    let node = TensorNode::new(
        TensorKind::Nested {
            buffer: b,
            sizes: s,
            strides: st,
            offsets: o,
        },
        false,
    );
    f.arena.push_tensor_to_check(node, 0).unwrap();
    assert!(message(f.check()).contains("contiguous"));
}

fn per_channel(
    shape: &[u64],
    scales: (DType, &[u64]),
    zero_points: (DType, &[u64]),
    axis: i64,
) -> Result<(), Error> {
    let mut f = File::new();
    let numel = |s: &[u64]| s.iter().product::<u64>() as usize;
    let s = f.tensor(scales.0, &vec![1; numel(scales.1)], scales.1);
    let z = f.tensor(zero_points.0, &vec![0; numel(zero_points.1)], zero_points.1);
    f.mem.push(vec![0; numel(shape)]);
    let dense = Dense {
        storage: StorageId(f.mem.len() as u32 - 1),
        dtype: DType::QInt8,
        offset: 0,
        shape: shape.into(),
        stride: contiguous(shape)[..].into(),
    };
    let params = QParams::PerChannel {
        qscheme: crate::torch::policy::QScheme::PerChannelAffine,
        scales: s,
        zero_points: z,
        axis,
    };
    let node = TensorNode::new(TensorKind::Quantized { dense, params }, false);
    f.arena.push_tensor_to_check(node, 0).unwrap();
    f.check()
}

#[test]
fn per_channel_parameters_have_one_entry_per_channel() {
    let (f64_, i64_) = (DType::Float64, DType::Int64);
    per_channel(&[3, 4], (f64_, &[3]), (i64_, &[3]), 0).unwrap();
    per_channel(&[3, 4], (f64_, &[4]), (i64_, &[4]), 1).unwrap();
    per_channel(&[3, 4], (DType::Float32, &[3]), (DType::Float32, &[3]), 0).unwrap();
    per_channel(&[0, 4], (f64_, &[0]), (i64_, &[0]), 0).unwrap();
    let e = message(per_channel(&[3, 4], (f64_, &[3]), (i64_, &[3]), 1));
    assert!(
        e.contains("size[axis]=4, got scales=3, zero_points=3"),
        "{e}"
    );
    assert!(
        message(per_channel(&[3, 4], (f64_, &[3]), (i64_, &[4]), 0)).contains("zero_points=4")
    );
    assert!(message(per_channel(&[3, 4], (f64_, &[3]), (i64_, &[3]), 2))
        .contains("axis 2 out of range"));
    assert!(
        message(per_channel(&[3, 4], (f64_, &[3]), (i64_, &[3]), -1))
            .contains("axis -1 out of range")
    );
    assert!(message(per_channel(&[], (f64_, &[0]), (i64_, &[0]), 0)).contains("out of range"));
    assert!(
        message(per_channel(&[3, 4], (f64_, &[3, 1]), (i64_, &[3]), 0)).contains("dimension 1")
    );
    assert!(
        message(per_channel(&[3, 4], (i64_, &[3]), (i64_, &[3]), 0)).contains("floating point")
    );
    assert!(
        message(per_channel(&[3, 4], (f64_, &[3]), (DType::QInt8, &[3]), 0))
            .contains("cannot be converted")
    );
}

#[test]
fn reading_is_charged_against_the_budget() {
    // 2 x 1000 int64 indices: 16,000 bytes read, 2,000 values visited.
    let build = || {
        let mut f = File::new();
        let values: Vec<i64> = (0..2000).map(|i| i % 1000).collect();
        let i = f.i64s(&values, &[2, 1000]);
        let v = f.values(&[1000]);
        f.sparse(Layout::SparseCoo, &[i, v], &[1000, 1000], None);
        f
    };
    build().check_with_budget(32_000, u64::MAX).unwrap();
    let e = build().check_with_budget(31_999, u64::MAX).unwrap_err();
    assert!(e.is_limit(), "{e}");
}

#[test]
fn broadcast_indices_are_visited_once() {
    // (2, 2**40) indices of stride 0 over one int64: one value per dimension.
    let coo = |coalesced| {
        let mut f = File::new();
        let i = f.view(DType::Int64, &[0], 0, &[2, 1 << 40], &[0, 0]);
        let v = f.view(DType::Float32, &[1], 0, &[1 << 40], &[0]);
        f.sparse(Layout::SparseCoo, &[i, v], &[1, 1], coalesced);
        f.check_with_budget(u64::MAX, 64)
    };
    coo(None).unwrap();
    assert!(message(coo(Some(true))).contains("uncoalesced"));
    // CSR batches broadcast in both index tensors are one batch.
    let mut f = File::new();
    let c = f.view(DType::Int64, &[0, 1, 2], 0, &[1 << 40, 3], &[0, 1]);
    let p = f.view(DType::Int64, &[0, 1], 0, &[1 << 40, 2], &[0, 1]);
    let v = f.view(DType::Float32, &[1], 0, &[1 << 40, 2], &[0, 0]);
    f.sparse(Layout::SparseCsr, &[c, p, v], &[1 << 40, 2, 2], None);
    f.check_with_budget(u64::MAX, 64).unwrap();
}

#[test]
fn index_tensors_that_overlap_themselves_cost_at_most_a_multiple_of_the_file() {
    // CSR batches whose rows overlap (a batch stride of 1 over rows of
    // 2**16 + 1): 2**32 values visited over a storage of about 1 MiB.
    let n = 1u64 << 16;
    let mut f = File::new();
    let cidx: Vec<i64> = vec![0; (2 * n) as usize];
    let c = f.view(DType::Int64, &cidx, 0, &[n, n + 1], &[1, 1]);
    let p = f.view(DType::Int64, &[], 0, &[n, 0], &[1, 1]);
    let v = f.view(DType::Float32, &[], 0, &[n, 0], &[1, 1]);
    f.sparse(Layout::SparseCsr, &[c, p, v], &[n, n, 1], None);
    let e = message(f.check_with_budget(u64::MAX, 2 << 20));
    assert!(e.contains("overlap themselves"), "{e}");
}

#[test]
fn dense_and_per_tensor_quantized_tensors_are_not_checked_here() {
    let mut f = File::new();
    f.i64s(&[-5], &[1]);
    f.check().unwrap();
}
