//! AdamW (mlx-rs's, which skips bias correction: the warm-up covers the first steps) with
//! global-norm gradient clipping and a warm-up + cosine learning-rate schedule.

use std::path::Path;

use anyhow::{Context, Result};
use mlx_rs::Array;
use mlx_rs::optimizers::{AdamW, Optimizer, OptimizerState, clip_grad_norm};

use super::params::Params;

pub struct Optim {
    pub adamw: AdamW,
    pub lr: f32,
    pub warmup: usize,
    pub total: usize,
    pub clip: f32,
}

impl Optim {
    pub fn new(lr: f32, weight_decay: f32, warmup: usize, total: usize, clip: f32) -> Result<Self> {
        let adamw = AdamW::new(lr);
        let mut adamw = adamw;
        adamw.weight_decay = Array::from_f32(weight_decay);
        Ok(Self { adamw, lr, warmup, total, clip })
    }

    /// Linear warm-up, then cosine decay to a tenth of the peak at the last step.
    pub fn lr_at(&self, step: usize) -> f32 {
        if step < self.warmup {
            return self.lr * (step + 1) as f32 / self.warmup as f32;
        }
        let span = self.total.saturating_sub(self.warmup).max(1);
        let t = ((step - self.warmup) as f32 / span as f32).min(1.0);
        self.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f32::consts::PI * t).cos()))
    }

    /// One update of every parameter; returns the gradient norm before clipping.
    pub fn step(&mut self, params: &mut Params, grads: &Params, step: usize) -> Result<f32> {
        self.adamw.lr = Array::from_f32(self.lr_at(step));
        let (clipped, norm) = clip_grad_norm(grads, self.clip)?;
        for (k, g) in clipped.iter() {
            let p = params.get_mut(k).with_context(|| format!("gradient for unknown parameter {k}"))?;
            self.adamw.update_single(k, g, p)?;
        }
        Ok(norm)
    }

    pub fn save(&mut self, path: &Path) -> Result<()> {
        self.adamw.state.save_safetensors(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(())
    }

    pub fn load(&mut self, path: &Path) -> Result<()> {
        self.adamw.state.load_safetensors(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(())
    }

    /// Moment arrays (to evaluate with the parameters each step).
    pub fn arrays(&self) -> Vec<&Array> {
        self.adamw.state.values().flat_map(|(m, v)| [m, v]).collect()
    }
}
