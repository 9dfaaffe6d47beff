//! RMSNorm as mlx-lm applies it (`mx.fast.rms_norm`, the weight already a multiplier).

use anyhow::Result;
use mlx_rs::Array;

use crate::model::formats::weights::Weights;

pub struct RmsNorm {
    pub weight: Array,
    pub eps: f32,
}

impl RmsNorm {
    pub fn load(w: &mut Weights, name: &str, dim: i32, eps: f32) -> Result<Self> {
        Ok(Self { weight: w.take_shaped(name, &[dim])?, eps })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        Ok(mlx_rs::fast::rms_norm(x, Some(&self.weight), self.eps)?)
    }

    /// The residual sum `x + r` and its norm: one kernel where `add_norm` serves (CUDA, turned
    /// on), the add and the norm otherwise.
    pub fn forward_after_add(&self, x: &Array, r: &Array) -> Result<(Array, Array)> {
        if crate::model::cuda::add_norm::serves(x, r, &self.weight) {
            return crate::model::cuda::add_norm::add_rms_norm(x, r, &self.weight, self.eps);
        }
        let h = x.add(r)?;
        let y = self.forward(&h)?;
        Ok((h, y))
    }
}
