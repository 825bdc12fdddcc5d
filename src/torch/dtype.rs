//! torch dtypes: their names, element sizes, byte-swap units and numpy spellings.

macro_rules! dtypes {
    ($($variant:ident = $name:literal, $size:literal;)*) => {
        /// Every dtype torch 2.13 names in its weights-only allowlist.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DType { $($variant,)* }

        impl DType {
            pub const ALL: &'static [DType] = &[$(DType::$variant,)*];

            /// torch's canonical name, without the `torch.` prefix.
            pub fn name(self) -> &'static str {
                match self { $(DType::$variant => $name,)* }
            }

            /// Bytes per element, as `torch.dtype.itemsize` reports it.
            pub fn itemsize(self) -> u64 {
                match self { $(DType::$variant => $size,)* }
            }

            pub fn from_name(name: &str) -> Option<DType> {
                match name { $($name => Some(DType::$variant),)* _ => None }
            }
        }
    };
}

dtypes! {
    Float64 = "float64", 8;
    Float32 = "float32", 4;
    Float16 = "float16", 2;
    BFloat16 = "bfloat16", 2;
    Int64 = "int64", 8;
    Int32 = "int32", 4;
    Int16 = "int16", 2;
    Int8 = "int8", 1;
    UInt8 = "uint8", 1;
    Bool = "bool", 1;
    Complex128 = "complex128", 16;
    Complex64 = "complex64", 8;
    Complex32 = "complex32", 4;
    QInt8 = "qint8", 1;
    QInt32 = "qint32", 4;
    QUInt8 = "quint8", 1;
    QUInt4x2 = "quint4x2", 1;
    QUInt2x4 = "quint2x4", 1;
    UInt16 = "uint16", 2;
    UInt32 = "uint32", 4;
    UInt64 = "uint64", 8;
    Float8E4M3Fn = "float8_e4m3fn", 1;
    Float8E5M2 = "float8_e5m2", 1;
    Float8E4M3Fnuz = "float8_e4m3fnuz", 1;
    Float8E5M2Fnuz = "float8_e5m2fnuz", 1;
    Float8E8M0Fnu = "float8_e8m0fnu", 1;
    Float4E2M1FnX2 = "float4_e2m1fn_x2", 1;
    Bits8 = "bits8", 1;
    Bits16 = "bits16", 2;
    Bits1x8 = "bits1x8", 1;
    Bits2x4 = "bits2x4", 1;
    Bits4x2 = "bits4x2", 1;
    UInt1 = "uint1", 1;
    UInt2 = "uint2", 1;
    UInt3 = "uint3", 1;
    UInt4 = "uint4", 1;
    UInt5 = "uint5", 1;
    UInt6 = "uint6", 1;
    UInt7 = "uint7", 1;
    Int1 = "int1", 1;
    Int2 = "int2", 1;
    Int3 = "int3", 1;
    Int4 = "int4", 1;
    Int5 = "int5", 1;
    Int6 = "int6", 1;
    Int7 = "int7", 1;
}

/// How numpy holds a dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumpyDType {
    /// A numpy type string such as `<f4`.
    Native(&'static str),
    /// A dtype from the ml_dtypes package, by attribute name.
    MlDtypes(&'static str),
}

impl DType {
    /// The unit a big-endian payload is swapped in: complex numbers swap each half.
    pub fn swap_unit(self) -> u64 {
        match self {
            DType::Complex128 | DType::Complex64 | DType::Complex32 => self.itemsize() / 2,
            _ => self.itemsize(),
        }
    }

    /// Whether torch lets a tensor of this dtype require gradients: floating point
    /// and complex dtypes only.
    pub fn can_require_grad(self) -> bool {
        matches!(
            self,
            DType::Float64
                | DType::Float32
                | DType::Float16
                | DType::BFloat16
                | DType::Complex128
                | DType::Complex64
                | DType::Complex32
                | DType::Float8E4M3Fn
                | DType::Float8E5M2
                | DType::Float8E4M3Fnuz
                | DType::Float8E5M2Fnuz
                | DType::Float8E8M0Fnu
                | DType::Float4E2M1FnX2
        )
    }

    pub fn is_quantized(self) -> bool {
        matches!(
            self,
            DType::QInt8 | DType::QInt32 | DType::QUInt8 | DType::QUInt4x2 | DType::QUInt2x4
        )
    }

    /// The numpy dtype that holds the same bits, or `None` where numpy has none.
    pub fn numpy(self) -> Option<NumpyDType> {
        use NumpyDType::*;
        Some(match self {
            DType::Float64 => Native("<f8"),
            DType::Float32 => Native("<f4"),
            DType::Float16 => Native("<f2"),
            DType::Int64 => Native("<i8"),
            DType::Int32 => Native("<i4"),
            DType::Int16 => Native("<i2"),
            DType::Int8 => Native("|i1"),
            DType::UInt8 => Native("|u1"),
            DType::UInt16 => Native("<u2"),
            DType::UInt32 => Native("<u4"),
            DType::UInt64 => Native("<u8"),
            DType::Bool => Native("|b1"),
            DType::Complex128 => Native("<c16"),
            DType::Complex64 => Native("<c8"),
            DType::BFloat16 => MlDtypes("bfloat16"),
            DType::Float8E4M3Fn => MlDtypes("float8_e4m3fn"),
            DType::Float8E5M2 => MlDtypes("float8_e5m2"),
            DType::Float8E4M3Fnuz => MlDtypes("float8_e4m3fnuz"),
            DType::Float8E5M2Fnuz => MlDtypes("float8_e5m2fnuz"),
            DType::Float8E8M0Fnu => MlDtypes("float8_e8m0fnu"),
            _ => return None,
        })
    }

    /// The legacy storage class name (`FloatStorage`) of the dtypes that have one.
    pub fn legacy_storage_name(self) -> Option<&'static str> {
        Some(match self {
            DType::Float64 => "DoubleStorage",
            DType::Float32 => "FloatStorage",
            DType::Float16 => "HalfStorage",
            DType::BFloat16 => "BFloat16Storage",
            DType::Int64 => "LongStorage",
            DType::Int32 => "IntStorage",
            DType::Int16 => "ShortStorage",
            DType::Int8 => "CharStorage",
            DType::UInt8 => "ByteStorage",
            DType::Bool => "BoolStorage",
            DType::Complex128 => "ComplexDoubleStorage",
            DType::Complex64 => "ComplexFloatStorage",
            DType::QInt8 => "QInt8Storage",
            DType::QInt32 => "QInt32Storage",
            DType::QUInt8 => "QUInt8Storage",
            DType::QUInt4x2 => "QUInt4x2Storage",
            DType::QUInt2x4 => "QUInt2x4Storage",
            _ => return None,
        })
    }

    /// The legacy tensor class name (`FloatTensor`) of the dtypes that have one.
    pub fn legacy_tensor_name(self) -> Option<&'static str> {
        Some(match self {
            DType::Float64 => "DoubleTensor",
            DType::Float32 => "FloatTensor",
            DType::Float16 => "HalfTensor",
            DType::BFloat16 => "BFloat16Tensor",
            DType::Int64 => "LongTensor",
            DType::Int32 => "IntTensor",
            DType::Int16 => "ShortTensor",
            DType::Int8 => "CharTensor",
            DType::UInt8 => "ByteTensor",
            DType::Bool => "BoolTensor",
            _ => return None,
        })
    }

    pub fn from_legacy_storage_name(name: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.legacy_storage_name() == Some(name))
    }

    pub fn from_legacy_tensor_name(name: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.legacy_tensor_name() == Some(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sizes_match_torch() {
        assert_eq!(DType::ALL.len(), 46);
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(*d));
        }
        assert_eq!(DType::Complex64.swap_unit(), 4);
        assert_eq!(
            DType::from_legacy_storage_name("HalfStorage"),
            Some(DType::Float16)
        );
        assert_eq!(
            DType::from_legacy_tensor_name("BoolTensor"),
            Some(DType::Bool)
        );
    }
}
