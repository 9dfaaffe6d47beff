//! HF-original Qwen3.5 checkpoints converted at load, the way mlx-lm's `sanitize` converts them:
//! conv1d weights to [C, K, 1], zero-centred RMSNorm weights to multipliers (+1), fused expert
//! projections split. MTP weights get the same treatment (mlx-lm drops them; see the notes).

use anyhow::Result;
use mlx_rs::Array;

use crate::model::formats::weights::Weights;
use crate::model::ops::slice_axis;

const PLUS_ONE_SUFFIXES: [&str; 5] = [
    ".input_layernorm.weight",
    ".post_attention_layernorm.weight",
    "model.norm.weight",
    ".q_norm.weight",
    ".k_norm.weight",
];
const MTP_NORMS: [&str; 3] = ["mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"];

/// True when the tensors are in HF's layout (mlx-lm's own test: a conv1d weight not ending in 1).
pub fn is_hf_original(w: &Weights) -> bool {
    w.keys().any(|k| k.contains("conv1d.weight") && w.get(k).is_some_and(|a| a.shape().last() != Some(&1)))
}

pub fn sanitize(w: &mut Weights, tie_word_embeddings: bool) -> Result<()> {
    if tie_word_embeddings && w.contains("lm_head.weight") {
        w.take("lm_head.weight")?;
    }
    let hf = is_hf_original(w);
    let keys: Vec<String> = w.keys().cloned().collect();
    for key in keys {
        if hf && key.ends_with("conv1d.weight") {
            let a = w.take(&key)?;
            if a.shape().last() != Some(&1) {
                w.insert(key, mlx_rs::ops::move_axis(&a, 2, 1)?);
            } else {
                w.insert(key, a);
            }
        } else if key.ends_with(".experts.gate_up_proj") {
            // [E, 2I, H]: the first half is gate, the second up.
            let a = w.take(&key)?;
            let half = a.shape()[1] / 2;
            let base = key.trim_end_matches(".experts.gate_up_proj");
            w.insert(format!("{base}.switch_mlp.gate_proj.weight"), slice_axis(&a, 1, 0, half)?);
            w.insert(format!("{base}.switch_mlp.up_proj.weight"), slice_axis(&a, 1, half, 2 * half)?);
        } else if key.ends_with(".experts.down_proj") {
            let a = w.take(&key)?;
            let base = key.trim_end_matches(".experts.down_proj");
            w.insert(format!("{base}.switch_mlp.down_proj.weight"), a);
        }
    }
    stack_per_expert_weights(w)?;
    let keys: Vec<String> = w.keys().cloned().collect();
    for key in keys {
        let is_norm_1d = w.get(&key).is_some_and(|a| a.ndim() == 1);
        if !is_norm_1d {
            continue;
        }
        let plus_one = if key.starts_with("mtp.") {
            let is_mtp_norm = MTP_NORMS.contains(&key.as_str()) || PLUS_ONE_SUFFIXES.iter().any(|s| key.ends_with(s));
            // HF stores MTP norms zero-centred like the body; a sidecar may hold either
            // convention, so it is decided per vector the way MTPLX does (mean below 0.5).
            is_mtp_norm && (hf || mean_below_half(w.get(&key).unwrap())?)
        } else {
            hf && PLUS_ONE_SUFFIXES.iter().any(|s| key.ends_with(s))
        };
        if plus_one {
            let a = w.take(&key)?;
            let dtype = a.dtype();
            let bumped = a.as_dtype(mlx_rs::Dtype::Float32)?.add(Array::from_f32(1.0))?.as_dtype(dtype)?;
            w.insert(key, bumped);
        }
    }
    Ok(())
}

fn mean_below_half(a: &Array) -> Result<bool> {
    let m = mlx_rs::ops::mean(a.as_dtype(mlx_rs::Dtype::Float32)?, None)?;
    m.eval()?;
    Ok(m.item_cast::<f32>() < 0.5)
}

/// HF qwen3_next stores experts one by one (`experts.{e}.{gate,up,down}_proj.weight`); stack them
/// into `switch_mlp.*` [E, out, in] as mlx-lm's qwen3_next sanitize does.
fn stack_per_expert_weights(w: &mut Weights) -> Result<()> {
    let firsts: Vec<String> = w.keys().filter(|k| k.ends_with(".experts.0.up_proj.weight")).cloned().collect();
    for first in firsts {
        let base = first.trim_end_matches(".experts.0.up_proj.weight").to_owned();
        for proj in ["gate_proj", "up_proj", "down_proj"] {
            let mut parts = Vec::new();
            while let Some(a) = w.get(&format!("{base}.experts.{}.{proj}.weight", parts.len())).cloned() {
                w.take(&format!("{base}.experts.{}.{proj}.weight", parts.len()))?;
                parts.push(a);
            }
            w.insert(format!("{base}.switch_mlp.{proj}.weight"), mlx_rs::ops::stack(&parts, 0)?);
        }
    }
    Ok(())
}

/// qwen3_next packs the GDN input projections per key-head group: `in_proj_qkvz` rows are
/// [q_g | k_g | v_g | z_g] for each group g, `in_proj_ba` rows [b_g | a_g]. Reorder the rows into
/// Qwen3.5's separate `in_proj_qkv` ([q | k | v], head-major), `in_proj_z`, `in_proj_b` and
/// `in_proj_a`, so one GDN implementation serves both. Rows are independent (quantization groups
/// run along the input), so packed weights, scales and biases are permuted alike.
pub fn split_grouped_projections(w: &mut Weights, cfg: &crate::model::config::Qwen35Config) -> Result<()> {
    let (nk, dk, nv, dv) =
        (cfg.linear_num_key_heads, cfg.linear_key_head_dim, cfg.linear_num_value_heads, cfg.linear_value_head_dim);
    let r = nv / nk;
    let group = 2 * dk + 2 * r * dv;
    let rows = |part_start: i32, part_len: i32, stride: i32| -> Vec<i32> {
        (0..nk).flat_map(|g| (0..part_len).map(move |i| g * stride + part_start + i)).collect()
    };
    let (q, k, v, z) =
        (rows(0, dk, group), rows(dk, dk, group), rows(2 * dk, r * dv, group), rows(2 * dk + r * dv, r * dv, group));
    let qkv: Vec<i32> = q.into_iter().chain(k).chain(v).collect();
    let (b, a) = (rows(0, r, 2 * r), rows(r, r, 2 * r));
    let prefixes: Vec<String> =
        w.keys().filter_map(|k| k.strip_suffix(".in_proj_qkvz.weight").map(str::to_owned)).collect();
    for p in prefixes {
        permute_rows(
            w,
            &format!("{p}.in_proj_qkvz"),
            &[(&format!("{p}.in_proj_qkv"), &qkv), (&format!("{p}.in_proj_z"), &z)],
        )?;
        permute_rows(
            w,
            &format!("{p}.in_proj_ba"),
            &[(&format!("{p}.in_proj_b"), &b), (&format!("{p}.in_proj_a"), &a)],
        )?;
    }
    Ok(())
}

fn permute_rows(w: &mut Weights, from: &str, to: &[(&str, &Vec<i32>)]) -> Result<()> {
    for suffix in ["weight", "scales", "biases"] {
        let key = format!("{from}.{suffix}");
        if !w.contains(&key) {
            continue;
        }
        let a = w.take(&key)?;
        for (name, rows) in to {
            let idx = Array::from_slice(rows, &[rows.len() as i32]);
            w.insert(format!("{name}.{suffix}"), a.take_axis(&idx, 0)?);
        }
    }
    Ok(())
}
