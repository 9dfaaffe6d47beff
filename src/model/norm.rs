//! RMSNorm as mlx-lm applies it (`mx.fast.rms_norm`, the weight already a multiplier).

use anyhow::Result;
use mlx_rs::Array;

use super::weights::Weights;

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
}
