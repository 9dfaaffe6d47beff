//! The dense SwiGLU MLP: `down(silu(gate(x)) * up(x))`.

use anyhow::Result;
use mlx_rs::Array;

use super::config::QuantSpec;
use super::linear::Linear;
use super::weights::Weights;

pub struct Mlp {
    pub(crate) gate_proj: Linear,
    pub(crate) up_proj: Linear,
    pub(crate) down_proj: Linear,
}

impl Mlp {
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        hidden: i32,
        inter: i32,
        quant: &dyn Fn(&str) -> Option<QuantSpec>,
    ) -> Result<Self> {
        let lin = |w: &mut Weights, name: &str, i, o| {
            Linear::load(w, &format!("{prefix}.{name}"), i, o, quant(&format!("{prefix}.{name}")))
        };
        Ok(Self {
            gate_proj: lin(w, "gate_proj", hidden, inter)?,
            up_proj: lin(w, "up_proj", hidden, inter)?,
            down_proj: lin(w, "down_proj", inter, hidden)?,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        let h = mlx_rs::nn::silu(self.gate_proj.forward(x)?)?.multiply(self.up_proj.forward(x)?)?;
        self.down_proj.forward(&h)
    }

    pub fn nbytes(&self) -> usize {
        self.gate_proj.nbytes() + self.up_proj.nbytes() + self.down_proj.nbytes()
    }
}
