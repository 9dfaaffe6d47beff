//! `cohort bench-step`: what one step costs, whatever the acceptance: prefill tokens/s, the B1
//! AR step, and a B8 cycle split into draft / verify / commit / sampling, each against its floor
//! (the bytes of weights it must read / the memory bandwidth measured in the same run).
//! `--synthetic qwen36-35b-a3b` builds random weights at the real geometry on the device.

use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use mlx_rs::{Array, Dtype};

use crate::engine::cohort::FIXED_WIDTH;
use crate::engine::runtime::{MemoryStats, human_bytes, median};
use crate::engine::solo::restore_from_capture;
use crate::model::config::{LayerKind, Qwen35Config};
use crate::model::forward::{LanguageModel, Logits};
use crate::model::kv_slots;
use crate::model::ops::host_u32;
use crate::model::qwen3_5::Qwen35Model;

#[derive(Args)]
pub struct BenchStepArgs {
    /// Random weights at a named geometry instead of a model directory.
    #[arg(long)]
    synthetic: Option<String>,
    /// Decoder layers of the synthetic model (default: the geometry's).
    #[arg(long)]
    layers: Option<i32>,
    /// Vocabulary of the synthetic model (default: the geometry's).
    #[arg(long)]
    vocab: Option<i32>,
    #[arg(long, short = 'm')]
    model: Option<String>,
    /// Prompt length for the prefill measurement.
    #[arg(long, default_value_t = 2048)]
    prefill: usize,
    /// Timed repetitions (medians are reported).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Gated DeltaNet recurrence routes to measure one after the other on the same model
    /// (`kernel,ops` compares the fused CUDA kernel with the plain-ops loop side by side);
    /// default: the route the engine picks.
    #[arg(long, value_delimiter = ',')]
    gdn_routes: Vec<GdnRoute>,
    /// Cohort attention paths to measure one after the other (`batched,rows` compares one
    /// masked attention over the packed rows with one chain per row).
    #[arg(long, value_delimiter = ',', default_value = "batched")]
    attention: Vec<AttentionPath>,
    /// MoE block routes to measure one after the other (`compiled,ops` compares the block as
    /// one compiled graph with its plain ops); default: the route the engine picks.
    #[arg(long, value_delimiter = ',')]
    moe: Vec<MoeRoute>,
    /// Write the figures as JSON here too.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GdnRoute {
    Kernel,
    Ops,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionPath {
    Batched,
    Rows,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MoeRoute {
    Compiled,
    Ops,
}

/// One route's medians, in ms (prefill in tokens/s).
#[derive(serde::Serialize)]
struct Figures {
    route: GdnRoute,
    attention: AttentionPath,
    moe: MoeRoute,
    prefill_tok_s: f64,
    b1_ms: f64,
    draft_ms: f64,
    verify_ms: f64,
    commit_ms: f64,
    sample_ms: f64,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Device memory bandwidth: a copy of 1 GiB (2 GiB moved), median of 5.
fn bandwidth_gbs() -> Result<f64> {
    let n = 1 << 28; // 2^28 f32 = 1 GiB
    let a = mlx_rs::ops::ones::<f32>(&[n])?;
    a.eval()?;
    let mut times = Vec::new();
    for _ in 0..6 {
        let t = Instant::now();
        let b = a.multiply(Array::from_f32(1.0))?;
        b.eval()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.remove(0);
    Ok(2.0 * (n as f64 * 4.0) / median(times) / 1e9)
}

/// Bytes of one affine-quantized [out, in] matrix (4-bit g64: 0.5 byte a weight + bf16 scale
/// and bias per 64) or a bf16 one.
fn matrix_bytes(out: i64, inp: i64, bits: i64, group: i64) -> f64 {
    (out * inp) as f64 * (bits as f64 / 8.0) + (out * (inp / group) * 4) as f64
}

/// Weight bytes a forward over `rows` tokens must read: everything but the routed experts, plus
/// the expected number of distinct experts `rows` tokens touch per MoE layer.
fn step_bytes(cfg: &Qwen35Config, rows: i64, with_head: bool) -> f64 {
    let (h, e, k, i) = (
        cfg.hidden_size as i64,
        cfg.num_experts as i64,
        cfg.num_experts_per_tok as i64,
        cfg.moe_intermediate_size as i64,
    );
    let q = |o: i64, n: i64| matrix_bytes(o, n, 4, 64);
    let mut bytes = 0.0;
    for l in 0..cfg.num_hidden_layers {
        bytes += match cfg.layer_kind(l) {
            LayerKind::Linear => {
                let (hv, dv) = (cfg.linear_num_value_heads as i64, cfg.linear_value_head_dim as i64);
                q(cfg.conv_dim() as i64, h) + q(hv * dv, h) + 2.0 * q(hv, h) + q(h, hv * dv)
            }
            LayerKind::Full => {
                let (nh, nkv, hd) =
                    (cfg.num_attention_heads as i64, cfg.num_key_value_heads as i64, cfg.head_dim as i64);
                q(2 * nh * hd, h) + 2.0 * q(nkv * hd, h) + q(h, nh * hd)
            }
        };
        let s = cfg.shared_expert_intermediate_size as i64;
        bytes += matrix_bytes(e, h, 8, 64) + 3.0 * q(s, h);
        let distinct = e as f64 * (1.0 - (1.0 - k as f64 / e as f64).powi(rows as i32));
        bytes += distinct * 3.0 * q(i, h);
    }
    if with_head {
        bytes += q(cfg.vocab_size as i64, h);
    }
    bytes
}

fn measure(
    model: &Qwen35Model,
    cfg: &Qwen35Config,
    args: &BenchStepArgs,
    route: GdnRoute,
    attention: AttentionPath,
    moe: MoeRoute,
) -> Result<Figures> {
    let vocab = cfg.vocab_size as u32;
    let ids = |n: usize, salt: u32| -> Vec<u32> { (0..n as u32).map(|i| (i * 7919 + salt * 104729) % vocab).collect() };

    // Prefill of one row.
    let mut warm = model.new_row();
    model.prefill(&mut warm, &ids(64, 9), 64, false)?;
    let mut row = model.new_row();
    let t = Instant::now();
    model.prefill(&mut row, &ids(args.prefill, 1), args.prefill, false)?;
    let prefill_s = t.elapsed().as_secs_f64();

    // B1 AR steps.
    let mut tok = Array::from_slice(&[5i32], &[1, 1]);
    let mut b1 = Vec::new();
    for i in 0..args.iters + 2 {
        let t = Instant::now();
        let out = model.forward(&tok, &mut [&mut row], Logits::Last, false)?;
        let next =
            mlx_rs::ops::indexing::argmax_axis(out.logits.as_ref().unwrap(), -1, None)?.as_dtype(Dtype::Int32)?;
        let mut arrays = row.arrays();
        arrays.push(&next);
        mlx_rs::transforms::eval(arrays)?;
        if i >= 2 {
            b1.push(ms(t));
        }
        tok = next.reshape(&[1, 1])?;
    }

    // B8 cycles: draft at M8, verify at M16, commit (keep = 1 for every row), sampling readback.
    let mut rows: Vec<_> = (0..FIXED_WIDTH).map(|_| model.new_row()).collect();
    let mut hidden = Vec::new();
    for (b, r) in rows.iter_mut().enumerate() {
        let (h, _, _) = model.prefill(r, &ids(64 + 8 * b, b as u32 + 2), 512, false)?;
        hidden.push(h);
    }
    let hidden = mlx_rs::ops::concatenate(&hidden, 0)?;
    let x0 = Array::from_slice(&(0..FIXED_WIDTH as i32).map(|b| 11 + b).collect::<Vec<_>>(), &[FIXED_WIDTH as i32, 1]);
    // As in an MTP cohort: every row has MTP history, and the cohort packs every row's KV.
    model.mtp_forward(&hidden, &x0, &mut rows.iter_mut().collect::<Vec<_>>())?;
    let slots = kv_slots::pack(&mut rows)?;
    kv_slots::eval_with(&slots, [])?;
    let (mut draft, mut verify, mut commit, mut sample) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.iters + 2 {
        let before = rows.clone();
        let mut refs: Vec<_> = rows.iter_mut().collect();
        let t = Instant::now();
        let q = model.mtp_forward(&hidden, &x0, &mut refs)?;
        let d = mlx_rs::ops::indexing::argmax_axis(&q.reshape(&[FIXED_WIDTH as i32, -1])?, -1, true)?
            .as_dtype(Dtype::Int32)?;
        kv_slots::eval_with(&slots, refs.iter().flat_map(|r| r.mtp.arrays()).chain([&d]))?;
        let t_draft = ms(t);
        let t = Instant::now();
        let out = model.forward(&mlx_rs::ops::concatenate(&[x0.clone(), d], 1)?, &mut refs, Logits::All, true)?;
        let am = mlx_rs::ops::indexing::argmax_axis(out.logits.as_ref().unwrap(), -1, None)?;
        kv_slots::eval_with(&slots, refs.iter().flat_map(|r| r.arrays()).chain([&am, &out.hidden]))?;
        let t_verify = ms(t);
        let t = Instant::now();
        let picked = host_u32(&am)?;
        let t_sample = ms(t);
        let t = Instant::now();
        for (b, r) in rows.iter_mut().enumerate() {
            r.trim_attention(1)?;
            restore_from_capture(r, &out.captures, 0, b);
        }
        let a: Vec<&Array> = rows.iter().flat_map(|r| r.arrays()).collect();
        mlx_rs::transforms::eval(a)?;
        let t_commit = ms(t);
        debug_assert_eq!(picked.len(), 2 * FIXED_WIDTH);
        rows = before; // every timed cycle starts from the same state
        if i >= 2 {
            draft.push(t_draft);
            verify.push(t_verify);
            commit.push(t_commit);
            sample.push(t_sample);
        }
    }
    Ok(Figures {
        route,
        attention,
        moe,
        prefill_tok_s: args.prefill as f64 / prefill_s,
        b1_ms: median(b1),
        draft_ms: median(draft),
        verify_ms: median(verify),
        commit_ms: median(commit),
        sample_ms: median(sample),
    })
}

pub fn run(args: BenchStepArgs) -> Result<()> {
    let routes = if args.gdn_routes.is_empty() {
        vec![if crate::model::gdn_kernel::enabled() { GdnRoute::Kernel } else { GdnRoute::Ops }]
    } else {
        args.gdn_routes.clone()
    };
    anyhow::ensure!(
        !routes.iter().any(|r| matches!(r, GdnRoute::Kernel))
            || crate::engine::runtime::Backend::detect() == crate::engine::runtime::Backend::Cuda,
        "the fused Gated DeltaNet kernel needs MLX's CUDA backend"
    );
    let t_load = Instant::now();
    let (model, cfg): (Box<Qwen35Model>, Qwen35Config) = match (&args.synthetic, &args.model) {
        (Some(g), _) => {
            let cfg = crate::model::synth::geometry(g, args.layers, args.vocab)?;
            let dtype = crate::model::load::default_dtype();
            let mut w = crate::model::synth::make_weights(&cfg, dtype, 7)?;
            (Box::new(Qwen35Model::from_weights(cfg.clone(), &mut w, dtype)?), cfg)
        }
        (None, m) => {
            let dir = match m {
                Some(m) => crate::model::load::resolve(m)?,
                None => crate::model::load::default_model()?,
            };
            let cfg =
                Qwen35Config::load(&dir.join("config.json")).context("bench-step measures Qwen3.5-family models")?;
            (Box::new(Qwen35Model::load(&dir, crate::model::load::default_dtype())?), cfg)
        }
    };
    let load_s = t_load.elapsed().as_secs_f64();
    let mem_loaded = MemoryStats::read();
    let bw = bandwidth_gbs()?;
    eprintln!("model ready in {load_s:.1} s ({} active); bandwidth {bw:.0} GB/s", human_bytes(mem_loaded.active));
    let moe_routes = if args.moe.is_empty() {
        vec![if crate::model::moe_graph::enabled() { MoeRoute::Compiled } else { MoeRoute::Ops }]
    } else {
        args.moe.clone()
    };
    let mut all = Vec::new();
    for route in routes {
        for &attention in &args.attention {
            for &moe in &moe_routes {
                crate::model::gdn_kernel::set_enabled(matches!(route, GdnRoute::Kernel));
                kv_slots::set_batched_attention(matches!(attention, AttentionPath::Batched));
                crate::model::moe_graph::set_enabled(Some(matches!(moe, MoeRoute::Compiled)));
                eprintln!("measuring: {route:?} recurrence, {attention:?} cohort attention, {moe:?} MoE block");
                all.push(measure(&model, &cfg, &args, route, attention, moe)?);
            }
        }
    }
    let mem = MemoryStats::read();
    let floor = |bytes: f64| bytes / (bw * 1e9) * 1e3;
    let b1_floor = floor(step_bytes(&cfg, 1, true));
    let mtp_cfg = {
        let mut c = cfg.clone();
        c.num_hidden_layers = 1;
        c.full_attention_interval = 1;
        c
    };
    let draft_floor = floor(step_bytes(&mtp_cfg, FIXED_WIDTH as i64, true));
    let verify_floor = floor(step_bytes(&cfg, 2 * FIXED_WIDTH as i64, true));
    println!(
        "geometry: {} layers, hidden {}, {} experts top-{}, vocab {}",
        cfg.num_hidden_layers, cfg.hidden_size, cfg.num_experts, cfg.num_experts_per_tok, cfg.vocab_size
    );
    println!("memory bandwidth (1 GiB copy): {bw:.0} GB/s; weights resident: {}", human_bytes(mem_loaded.active));
    println!("peak memory {}", human_bytes(mem.peak));
    for f in &all {
        println!("\nGated DeltaNet route: {:?}; cohort attention: {:?}; MoE block: {:?}", f.route, f.attention, f.moe);
        println!("prefill {} tokens: {:.0} tok/s", args.prefill, f.prefill_tok_s);
        println!("| step | median ms | floor ms | ratio |");
        println!("| --- | --- | --- | --- |");
        println!("| B1 AR step (T=1) | {:.2} | {b1_floor:.3} | {:.1}x |", f.b1_ms, f.b1_ms / b1_floor);
        println!("| B8 draft (MTP, M=8) | {:.2} | {draft_floor:.3} | {:.1}x |", f.draft_ms, f.draft_ms / draft_floor);
        println!(
            "| B8 verify (T=2, M=16) | {:.2} | {verify_floor:.3} | {:.1}x |",
            f.verify_ms,
            f.verify_ms / verify_floor
        );
        println!("| B8 commit (keep=1, all rows) | {:.2} | | |", f.commit_ms);
        println!("| B8 sampling readback (ids) | {:.3} | | |", f.sample_ms);
        let cycle = f.draft_ms + f.verify_ms + f.commit_ms + f.sample_ms;
        println!("B1 AR: {:.1} tok/s; B8 cycle {cycle:.2} ms", 1e3 / f.b1_ms);
        for acc in [0.0, 0.3, 0.6, 0.8] {
            println!(
                "  projected B8 aggregate at acceptance {acc:.1}: {:.0} tok/s",
                FIXED_WIDTH as f64 * (1.0 + acc) / (cycle * 1e-3)
            );
        }
    }
    if let [a, b] = &all[..] {
        println!(
            "\n{:?}+{:?}+{:?} / {:?}+{:?}+{:?} speed-up: prefill {:.2}x, B1 step {:.2}x, B8 draft {:.2}x, B8 verify {:.2}x",
            a.route,
            a.attention,
            a.moe,
            b.route,
            b.attention,
            b.moe,
            a.prefill_tok_s / b.prefill_tok_s,
            b.b1_ms / a.b1_ms,
            b.draft_ms / a.draft_ms,
            b.verify_ms / a.verify_ms
        );
    }
    if let Some(path) = &args.json {
        let j = serde_json::json!({"layers": cfg.num_hidden_layers, "bandwidth_gbs": bw, "prefill_tokens": args.prefill,
            "b1_floor_ms": b1_floor, "draft_floor_ms": draft_floor, "verify_floor_ms": verify_floor,
            "routes": all, "weights_bytes": mem_loaded.active, "peak_bytes": mem.peak, "load_s": load_s});
        std::fs::write(path, serde_json::to_string_pretty(&j)?)?;
    }
    Ok(())
}
