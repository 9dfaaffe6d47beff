//! The dense SwiGLU MLP: `down(silu(gate(x)) * up(x))`.

use anyhow::Result;
use mlx_rs::Array;

use super::linear::Linear;
use crate::model::config::QuantSpec;
use crate::model::formats::weights::Weights;

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
        let (gate, up) = (self.gate_proj.forward(x)?, self.up_proj.forward(x)?);
        let h = if host_gate(&gate) {
            // MLX's CPU build computes exp at width one, each step a libm fmaf call: its fused
            // silu kernel was ~6% of a prefill (docs/benchmarks.md); glibc's expf is cheaper.
            mlx_rs::transforms::eval([&gate, &up])?;
            let (mut g, u) = (crate::model::cpu::host_ops::to_host(&gate)?, crate::model::cpu::host_ops::to_host(&up)?);
            crate::model::cpu::host_ops::silu_mul(&mut g, &u);
            Array::from_slice(&g, gate.shape())
        } else {
            mlx_rs::nn::silu(gate)?.multiply(up)?
        };
        self.down_proj.forward(&h)
    }

    pub fn nbytes(&self) -> usize {
        self.gate_proj.nbytes() + self.up_proj.nbytes() + self.down_proj.nbytes()
    }
}

/// SwiGLU's gate on the host: float32 blocks on MLX's CPU backend, wherever the MLP runs as MLX
/// ops (prefill chunks; every block of a model without the host decode path)
/// (`Routes::host_gate`).
fn host_gate(gate: &Array) -> bool {
    crate::model::routes::current().host_gate && gate.dtype() == mlx_rs::Dtype::Float32
}
