//! How a projection's weight is stored once loaded: the layers build their products from it and
//! the CUDA kernels take it with the weight's arrays, so it sits below both.

use super::config::QuantSpec;

/// How one projection's weight is stored, which decides its op and how many inputs it takes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Storage {
    /// [w]: a float weight.
    Dense,
    /// [w, scales, biases]: packed affine quantization.
    Quantized(QuantSpec),
    /// [w, scales, biases] padded with zero rows; the first `.1` outputs are the projection's
    /// ([`crate::model::layers::product::Layout::Padded`]).
    Padded(QuantSpec, i32),
    /// [w, scales, biases, dense]: packed, with the dequantized weight for blocks of many rows
    /// ([`crate::model::layers::product::Layout::WithDense`]).
    WithDense(QuantSpec),
    /// []: no weight of its own, folded into another projection's product
    /// ([`crate::model::layers::linear::fuse_outputs`]).
    Folded,
}

impl Storage {
    pub fn inputs(self) -> usize {
        match self {
            Storage::Dense => 1,
            Storage::Quantized(_) | Storage::Padded(..) => 3,
            Storage::WithDense(_) => 4,
            Storage::Folded => 0,
        }
    }

    /// The quantization of a packed weight whose first three arrays are [w, scales, biases] at
    /// the projection's own width (so not a padded one).
    pub fn packed_as_stored(self) -> Option<QuantSpec> {
        match self {
            Storage::Quantized(q) | Storage::WithDense(q) => Some(q),
            _ => None,
        }
    }
}
