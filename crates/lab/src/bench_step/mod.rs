//! `cohort-lab bench-step`: what one step costs, whatever the acceptance: prefill tokens/s, the B1
//! AR step, and a B8 cycle split into draft / verify / commit / sampling, each against its floor
//! (the bytes of weights it must read / the memory bandwidth measured in the same run).
//! `--synthetic qwen36-35b-a3b` builds random weights at the real geometry on the device.

use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use mlx_rs::{Array, Dtype};

mod b8;
mod report;
mod switches;

use crate::cuda_profiler::Window;
use b8::{B8Times, b8_cycles, interleaved_b8, tokenizer_for};
use cohort_core::engine::cohort::FIXED_WIDTH;
use cohort_core::engine::cycle::Phase;
use cohort_core::model::config::{LayerKind, Qwen35Config};
use cohort_core::model::families::qwen3_5::Qwen35Model;
use cohort_core::model::forward::{LanguageModel, Logits};
use cohort_core::model::layers::cache::{PackedKv, RowCache};
use cohort_core::model::routes::BlockRoute;
use cohort_core::model::routes::Routes;
use cohort_core::model::text::tokenizer::TextTokenizer;
use cohort_core::platform::backend::{MemoryStats, human_bytes};
use cohort_core::platform::timing::median;
use switches::KernelSwitch;

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
    /// Activation dtype (float32, bfloat16; default: the backend's).
    #[arg(long)]
    dtype: Option<String>,
    /// Prompt length for the prefill measurement (1 to 131,072).
    #[arg(long, default_value_t = 2048, value_parser = parse_count::<131_072>)]
    prefill: usize,
    /// Tokens the prefill reads at a time (1 to 131,072; the engine reads 2,048 at a time on a
    /// GPU): one chunk of 8,192 or more fails inside MLX's CUDA graph building.
    #[arg(long, default_value_t = 2048, value_parser = parse_count::<131_072>)]
    prefill_chunk: usize,
    /// Timed repetitions, medians reported (1 to 10,000).
    #[arg(long, default_value_t = 20, value_parser = parse_count::<10_000>)]
    pub(super) iters: usize,
    /// Gated DeltaNet recurrence routes to measure one after the other on the same model
    /// (`kernel,ops` compares the fused CUDA kernel with the plain-ops loop side by side);
    /// default: the route the engine picks.
    #[arg(long, value_delimiter = ',')]
    gdn_routes: Vec<GdnRoute>,
    /// Cohort attention paths to measure one after the other (`batched,rows` compares one
    /// masked attention over the packed rows with one chain per row).
    #[arg(long, value_delimiter = ',', default_value = "batched")]
    attention: Vec<AttentionPath>,
    /// Which blocks run as compiled graphs, one arm after the other (`none,all,all,none` is
    /// ABBA of the plain ops against the compiled MoE block and Gated DeltaNet mixer); default:
    /// what the engine picks.
    #[arg(long, value_delimiter = ',')]
    compiled: Vec<CompiledBlocks>,
    /// After the arms, time B1 steps of every `--compiled` arm in turn, each on its own row.
    #[arg(long)]
    interleave_b1: bool,
    /// After the arms, time B8 cycles and B8 AR steps with every arm's switches in turn
    /// (`--compiled` and the route arms: `--router-kernel`, `--fused-front`, `--experts-kernel`,
    /// ...) on one cohort of eight rows of the first loaded model.
    #[arg(long)]
    interleave_b8: bool,
    /// Where the MoE block's gather rows come from in the interleaved B1 arms (each `--compiled`
    /// arm with each of these): `held` (evaluated inputs, the engine's way) or `built` (by
    /// `gather_qmm` in every call, as before).
    #[arg(long, value_delimiter = ',', default_value = "held")]
    moe_rows: Vec<MoeRows>,
    /// The route arms: one flag for each route the switch table gives one (`--hand-over`,
    /// `--qk-kernel`, `--experts-kernel`, ...; `--help` lists them), each taking `on`, `off` or
    /// both.
    #[command(flatten)]
    pub(super) arms: switches::RouteArms,
    /// Projections that share an input stacked at load, on or off (`on,off` loads the model
    /// twice, so the interleaved B1 arms can step both in one process); default: the engine's.
    #[arg(long, value_delimiter = ',')]
    stacking: Vec<OnOff>,
    /// Which steps each arm times: `b1` (AR steps), `b8` (draft, verify, commit cycles), or
    /// both; one alone keeps a profiler's trace to that step's kernels.
    #[arg(long, value_delimiter = ',', default_value = "b1,b8")]
    pub(super) steps: Vec<StepKind>,
    /// Count the nodes of one B1 step's graph, one B8 draft's and one B8 verify's, by primitive.
    #[arg(long)]
    pub(super) graph_stats: bool,
    /// Bracket one step of this kind (the second of its kind, untimed) for Nsight Compute run as
    /// `ncu --profile-from-start off`, so its report holds that step's kernels only
    /// (`scripts/gpu/exact.sh ncu` runs it and sums them by kernel with ncu_summary.py).
    #[arg(long)]
    profile_step: Option<ProfiledStep>,
    /// Only time the host's cost of one node of each kind a step is made of (no model).
    #[arg(long)]
    node_costs: bool,
    /// Write the figures as JSON here too.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
pub enum ProfiledStep {
    B1,
    Draft,
    Verify,
    Ar,
}

/// The step that `--profile-step` names opens a window: the second of its kind (`round` 1), so
/// the one-off work of the first (JIT compiles, graph caches) stays out and no timed step pays
/// for ncu serialising its kernels.
pub(super) fn profile_window(args: &BenchStepArgs, kind: ProfiledStep, round: usize) -> Result<Option<Window>> {
    if args.profile_step != Some(kind) || round != 1 {
        return Ok(None);
    }
    eprintln!("  profiling window open: {kind:?} step {}", round + 1);
    Window::open().map(Some)
}

/// Close a window after its step's outputs are evaluated.
pub(super) fn close_window(window: Option<Window>) -> Result<()> {
    match window {
        Some(w) => {
            w.close()?;
            eprintln!("  profiling window closed");
            Ok(())
        }
        None => Ok(()),
    }
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

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MoeRows {
    Held,
    Built,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    fn on(self) -> bool {
        self == OnOff::On
    }
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    B1,
    B8,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CompiledBlocks {
    None,
    Moe,
    Gdn,
    All,
}

impl CompiledBlocks {
    fn current() -> Self {
        let routes = cohort_core::model::routes::current();
        match (routes.compile_moe, routes.compile_gdn) {
            (false, false) => CompiledBlocks::None,
            (true, false) => CompiledBlocks::Moe,
            (false, true) => CompiledBlocks::Gdn,
            (true, true) => CompiledBlocks::All,
        }
    }

    pub(super) fn apply(self, routes: &mut Routes) {
        let (moe, gdn) = match self {
            CompiledBlocks::None => (false, false),
            CompiledBlocks::Moe => (true, false),
            CompiledBlocks::Gdn => (false, true),
            CompiledBlocks::All => (true, true),
        };
        (routes.compile_moe, routes.compile_gdn) = (moe, gdn);
    }
}

/// One route's medians, in ms (prefill in tokens/s).
#[derive(serde::Serialize)]
pub(super) struct Figures {
    pub(super) route: GdnRoute,
    pub(super) attention: AttentionPath,
    pub(super) compiled: CompiledBlocks,
    /// The first B1 step's logits against the first arm's: largest |difference| / largest |logit|.
    pub(super) b1_logits_vs_first: Option<f64>,
    /// Median time to build one B1 step's lazy graph (forward + argmax, before evaluation).
    pub(super) b1_build_ms: f64,
    /// Median time from the start of a B1 step until MLX has handed every node to the device
    /// (`async_eval` returns): the host's share; the rest of the step is waiting for the device.
    pub(super) b1_enqueued_ms: f64,
    /// A B8 AR cycle (T=1 on all 8 packed rows, step, decide and commit): what a cohort that
    /// does not draft pays a token.
    pub(super) b8_ar_ms: f64,
    /// When the verify's and the B8 AR step's graphs were handed to the device (as for B1).
    pub(super) verify_enqueued_ms: f64,
    pub(super) b8_ar_enqueued_ms: f64,
    /// The engine's B8 MTP cycle (engine::cycle), phase by phase, each phase's arrays evaluated
    /// before the next starts.
    pub(super) owe_ms: f64,
    pub(super) prefill_tok_s: f64,
    pub(super) b1_ms: f64,
    /// A B1 AR step as a decode loop runs it: step n + 1 handed over before step n's token is
    /// read (total time / steps, so no median).
    pub(super) b1_pipelined_ms: f64,
    pub(super) draft_ms: f64,
    pub(super) verify_ms: f64,
    pub(super) decide_ms: f64,
    pub(super) commit_ms: f64,
    pub(super) mtp_cycle_ms: f64,
    /// The same cycles run as the lane runs them (no evaluation between phases): tokens a second
    /// over all eight rows, and the share of drafts accepted (random weights accept few).
    pub(super) served_tok_s: f64,
    pub(super) served_acceptance: f64,
}

/// A count from 1 to MAX: a prompt length or a repetition count the machine can hold.
fn parse_count<const MAX: usize>(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX).contains(&n) => Ok(n),
        _ => Err(format!("must be a whole number from 1 to {MAX}")),
    }
}

pub(super) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Device memory bandwidth: a copy of 1 GiB (2 GiB moved), median of 5.
/// The exactness gate and the construction check as the engine runs them at load: the linear
/// route a B8 MTP cohort is served on (the cycles timed below run on it), and what they decided,
/// in words.
fn served_route(model: &dyn LanguageModel) -> Result<(BlockRoute, String)> {
    let batched = BlockRoute::Batched;
    if !model.has_mtp() {
        return Ok((batched, format!("{batched:?} (no MTP weights: AR only)")));
    }
    let decision = cohort_core::engine::probe::gate(model, cohort_core::engine::probe::allow_inexact())?;
    if !decision.mtp_allowed {
        return Ok((batched, format!("MTP declined ({}); the B8 cycles below are not served", decision.summary)));
    }
    let batched = decision.batched_route();
    let numerics = cohort_core::engine::scheduler::Numerics::Throughput;
    let route = numerics.route_id_at("bench", FIXED_WIDTH);
    let choice = cohort_core::engine::construction::check_batched(model, numerics, batched, &route, &[FIXED_WIDTH])?;
    let cohort = if choice.check.passed {
        format!("B8 cohort batched on the {:?} route", choice.route)
    } else {
        "B8 cohorts refused by the construction check (served as b1-exact serial: the B8 cycles below are not served)"
            .to_owned()
    };
    Ok((choice.route, format!("{}; {cohort} (max |B8 - B1| {:.3e})", decision.summary, choice.check.max_abs_diff)))
}

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
            LayerKind::GatedDelta => {
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

/// `n` token ids spread over the vocabulary, different for each `salt` (the same prompt for the
/// same salt, so every arm prefills the same state).
pub(super) fn synthetic_ids(n: usize, salt: u32, vocab: i32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7919 + salt * 104729) % vocab as u32).collect()
}

/// One B1 step's times in ms from its start: graph built, graph handed to the device, done.
struct StepTimes {
    build: f64,
    enqueued: f64,
    total: f64,
}

/// One B1 AR step from `tok` [1, 1]: its times and the next token.
fn b1_step(model: &Qwen35Model, tok: &Array, row: &mut RowCache) -> Result<(StepTimes, Array)> {
    let t = Instant::now();
    let out = model.forward(tok, &mut [&mut *row], Logits::Last, false)?;
    let next = mlx_rs::ops::indexing::argmax_axis(out.logits.as_ref().unwrap(), -1, None)?.as_dtype(Dtype::Int32)?;
    let build = ms(t);
    let enqueued = eval_timed(PackedKv::none().with_buffers(row.arrays().into_iter().chain([&next])), t)?;
    Ok((StepTimes { build, enqueued, total: ms(t) }, next.reshape(&[1, 1])?))
}

/// `steps` B1 AR steps from `tok` as a greedy decode loop runs them (the engine's solo AR path,
/// and mlx-lm's `generate_step`): each step is built from the previous step's token while that
/// is still on the device and handed over before the previous token is read, so the host builds
/// step n + 1 while the device runs step n. Returns ms a step (total over `steps`).
fn b1_pipelined_ms(model: &Qwen35Model, row: &mut RowCache, tok: Array, steps: usize) -> Result<f64> {
    let step = |tok: &Array, row: &mut RowCache| -> Result<Array> {
        let out = model.forward(tok, &mut [&mut *row], Logits::Last, false)?;
        let next = mlx_rs::ops::indexing::argmax_axis(out.logits.as_ref().unwrap(), -1, None)?
            .as_dtype(Dtype::Int32)?
            .reshape(&[1, 1])?;
        mlx_rs::transforms::async_eval(row.arrays().into_iter().chain([&next]))?;
        Ok(next)
    };
    let mut current = step(&tok, row)?;
    current.eval()?;
    let t = Instant::now();
    for _ in 0..steps {
        let next = step(&current, row)?;
        let _ = current.item_cast::<i32>(); // the token a decode loop would emit now
        current = next;
    }
    current.eval()?;
    Ok(ms(t) / steps as f64)
}

/// Evaluate a step's outputs, handing them to the device first: ms from `t` to the handover.
pub(super) fn eval_timed(outputs: Vec<Array>, t: Instant) -> Result<f64> {
    mlx_rs::transforms::async_eval(&outputs)?;
    let handed = ms(t);
    mlx_rs::transforms::eval(&outputs)?;
    Ok(handed)
}

/// `--graph-stats`: one step's nodes by primitive, most frequent first, on one line each.
pub(super) fn print_graph_stats(what: &str, outputs: &[&Array]) -> Result<()> {
    let stats = crate::graph_stats::GraphStats::of(outputs)?;
    let mut kinds: Vec<_> = stats.by_primitive.iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let listed: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("graph of {what}: {} nodes: {}", stats.nodes, listed.join(", "));
    Ok(())
}

/// One interleaved B1 arm: which loaded model (by its stacking) and which switches.
#[derive(Clone, Copy)]
pub(super) struct Arm {
    pub model: usize,
    pub stacking: Option<OnOff>,
    pub compiled: CompiledBlocks,
    pub moe_rows: MoeRows,
    /// Each of [`KernelSwitch::all`]'s settings, in that order.
    pub kernels: [Option<OnOff>; switches::COUNT],
}

/// An arm's switch setting as the tables show it.
pub(super) fn label(k: Option<OnOff>) -> String {
    k.map(|k| format!("{k:?}")).unwrap_or_else(|| "default".into())
}

/// The kernel switches' table columns (`| fused kernels | ... |` without the outer bars).
pub(super) fn kernel_columns() -> String {
    KernelSwitch::all().map(KernelSwitch::column).join(" | ")
}

/// An arm's kernel settings as table cells, in [`kernel_columns`]' order.
pub(super) fn kernel_cells(arm: &Arm) -> String {
    arm.kernels.map(label).join(" | ")
}

/// The order arms take turns in a round: mirrored every other round (ABBA), so no arm always
/// runs right after the same one.
pub(super) fn arm_order(round: usize, arms: usize) -> Vec<usize> {
    if round.is_multiple_of(2) { (0..arms).collect() } else { (0..arms).rev().collect() }
}

/// The smallest and the largest of `v`, as the interleaved tables show a spread.
pub(super) fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::MAX, 0f64), |(l, h), &x| (l.min(x), h.max(x)))
}

/// Every interleaved arm: the loaded models (`--stacking`) crossed with `--compiled`,
/// `--moe-rows` and every kernel switch's settings ([`switches::combinations`]).
fn arms(models: &[(Option<OnOff>, Box<Qwen35Model>)], args: &BenchStepArgs, compiled: &[CompiledBlocks]) -> Vec<Arm> {
    let kernels = switches::combinations(args);
    let mut arms = Vec::new();
    for (model, (stacking, _)) in models.iter().enumerate() {
        for &compiled in compiled {
            for &moe_rows in &args.moe_rows {
                for &kernels in &kernels {
                    arms.push(Arm { model, stacking: *stacking, compiled, moe_rows, kernels });
                }
            }
        }
    }
    arms
}

/// An arm's routes: `base` with its switches.
pub(super) fn arm_routes(arm: &Arm, base: Routes) -> Routes {
    let mut routes = base;
    arm.compiled.apply(&mut routes);
    routes.moe_built_rows = arm.moe_rows == MoeRows::Built;
    for (switch, setting) in KernelSwitch::all().into_iter().zip(arm.kernels) {
        switch.apply(setting, &mut routes);
    }
    routes
}

/// B1 steps of every arm ([`arms`]) taken in turn (mirrored order every other round), each arm
/// on its own row: the arms see the same moments of a noisy host, which separate runs do not.
fn interleaved_b1(
    models: &[(Option<OnOff>, Box<Qwen35Model>)],
    args: &BenchStepArgs,
    compiled: &[CompiledBlocks],
) -> Result<()> {
    let arms = arms(models, args, compiled);
    let base = cohort_core::model::routes::current();
    let mut rows = Vec::new();
    for arm in &arms {
        let _in_force = cohort_core::model::routes::enter(arm_routes(arm, base));
        let model = &models[arm.model].1;
        let prompt = synthetic_ids(args.prefill, 1, model.cfg.vocab_size);
        let mut row = model.new_row();
        model.prefill(&mut row, &prompt, args.prefill_chunk, false)?;
        let tok = Array::from_slice(&[5i32], &[1, 1]);
        if args.graph_stats {
            let mut probe_row = row.clone();
            let probe = model.forward(&tok, &mut [&mut probe_row], Logits::Last, false)?;
            let next = mlx_rs::ops::indexing::argmax_axis(probe.logits.as_ref().unwrap(), -1, None)?;
            let kernels: Vec<String> = KernelSwitch::all()
                .into_iter()
                .zip(arm.kernels)
                .map(|(switch, setting)| format!("{} {}", switch.column(), label(setting)))
                .collect();
            let what = format!("a B1 step (stacking {}, {})", label(arm.stacking), kernels.join(", "));
            print_graph_stats(&what, &probe_row.arrays().into_iter().chain([&next]).collect::<Vec<_>>())?;
            mlx_rs::transforms::eval(probe_row.arrays().into_iter().chain([&next]))?;
        }
        rows.push((row, tok, Vec::new(), Vec::new()));
    }
    for round in 0..args.iters + 2 {
        for a in arm_order(round, arms.len()) {
            let _in_force = cohort_core::model::routes::enter(arm_routes(&arms[a], base));
            let (row, tok, steps, builds) = &mut rows[a];
            let (times, next) = b1_step(&models[arms[a].model].1, tok, row)?;
            *tok = next;
            if round >= 2 {
                steps.push(times.total);
                builds.push(times.build);
            }
        }
    }
    println!(
        "\nB1 AR steps interleaved ({} rounds, each arm's own row after a {}-token prefill)",
        args.iters, args.prefill
    );
    println!(
        "| stacking | {} | compiled blocks | MoE gather rows | median step ms | min | max | median graph build ms |",
        kernel_columns()
    );
    println!("|{}", " --- |".repeat(7 + switches::COUNT));
    for (arm, (_, _, steps, builds)) in arms.iter().zip(rows) {
        let (lo, hi) = min_max(&steps);
        println!(
            "| {} | {} | {:?} | {:?} | {:.2} | {lo:.2} | {hi:.2} | {:.2} |",
            label(arm.stacking),
            kernel_cells(arm),
            arm.compiled,
            arm.moe_rows,
            median(steps),
            median(builds)
        );
    }
    Ok(())
}

fn measure(
    model: &Qwen35Model,
    tokenizer: &TextTokenizer,
    args: &BenchStepArgs,
    route: GdnRoute,
    attention: AttentionPath,
    compiled: CompiledBlocks,
    first_logits: &mut Option<Vec<f32>>,
) -> Result<Figures> {
    let cfg = &model.cfg;
    let ids = |n: usize, salt: u32| synthetic_ids(n, salt, cfg.vocab_size);
    // Progress on stderr as each phase ends: a first call that traces graphs or JIT-compiles
    // kernels can take minutes on a fresh GPU machine, and a run cut off by a time limit should
    // still say where it was.
    let started = Instant::now();
    let progress =
        |what: &str, took: f64| eprintln!("  [{:7.1} s] {what}: {took:.3} s", started.elapsed().as_secs_f64());

    // Prefill of one row.
    let mut warm = model.new_row();
    let t = Instant::now();
    model.prefill(&mut warm, &ids(64, 9), 64, false)?;
    progress("warm-up prefill of 64 tokens", t.elapsed().as_secs_f64());
    let mut row = model.new_row();
    let t = Instant::now();
    model.prefill(&mut row, &ids(args.prefill, 1), args.prefill_chunk, false)?;
    let prefill_s = t.elapsed().as_secs_f64();
    progress(&format!("prefill of {} tokens", args.prefill), prefill_s);

    // B1 AR steps.
    let mut tok = Array::from_slice(&[5i32], &[1, 1]);
    // The first step's logits, from a copy of the row: every arm starts from the same prefilled
    // state, so arms that compute the same function agree up to rounding (and run-to-run noise,
    // which a deep random-weight model amplifies: compare with a repeated arm, on few layers).
    let mut probe_row = row.clone();
    let probe = model.forward(&tok, &mut [&mut probe_row], Logits::Last, false)?;
    if args.graph_stats {
        let next = mlx_rs::ops::indexing::argmax_axis(probe.logits.as_ref().unwrap(), -1, None)?;
        print_graph_stats("a B1 step", &probe_row.arrays().into_iter().chain([&next]).collect::<Vec<_>>())?;
    }
    let logits = probe.logits.as_ref().unwrap().as_dtype(Dtype::Float32)?.flatten(None, None)?;
    let logits = logits.as_slice::<f32>().to_vec();
    let b1_logits_vs_first = match first_logits {
        None => {
            *first_logits = Some(logits);
            None
        }
        Some(first) => {
            let scale = first.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
            let diff = first.iter().zip(&logits).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            Some((diff / scale) as f64)
        }
    };
    let (mut b1, mut b1_build, mut b1_enqueued) = (Vec::new(), Vec::new(), Vec::new());
    let rounds = |kind: StepKind| if args.steps.contains(&kind) { args.iters + 2 } else { 0 };
    for i in 0..rounds(StepKind::B1) {
        let window = profile_window(args, ProfiledStep::B1, i)?;
        let (times, next) = b1_step(model, &tok, &mut row)?;
        close_window(window)?;
        if i >= 2 {
            b1.push(times.total);
            b1_build.push(times.build);
            b1_enqueued.push(times.enqueued);
        } else {
            progress(&format!("B1 step {}", i + 1), times.total / 1e3);
        }
        tok = next;
    }
    progress(&format!("{} timed B1 steps", args.iters), b1.iter().sum::<f64>() / 1e3);
    let b1_pipelined =
        if rounds(StepKind::B1) > 0 { b1_pipelined_ms(model, &mut row, tok, args.iters)? } else { f64::NAN };

    // B8 cycles: the engine's own (owe history, draft at M8, verify at M16, decide, commit).
    let b8 = if rounds(StepKind::B8) > 0 { b8_cycles(model, tokenizer, args, &progress)? } else { B8Times::default() };
    let mtp = |p| B8Times::median(&b8.mtp, p);
    Ok(Figures {
        route,
        attention,
        compiled,
        prefill_tok_s: args.prefill as f64 / prefill_s,
        b1_logits_vs_first,
        b1_ms: median_or_nan(b1),
        b1_pipelined_ms: b1_pipelined,
        b1_build_ms: median_or_nan(b1_build),
        b1_enqueued_ms: median_or_nan(b1_enqueued),
        b8_ar_ms: B8Times::cycle_median(&b8.ar),
        verify_enqueued_ms: B8Times::median(&b8.mtp_handed, Phase::Verify),
        b8_ar_enqueued_ms: B8Times::median(&b8.ar_handed, Phase::Step),
        owe_ms: mtp(Phase::OweHistory),
        draft_ms: mtp(Phase::Draft),
        verify_ms: mtp(Phase::Verify),
        decide_ms: mtp(Phase::Decide),
        commit_ms: mtp(Phase::Commit),
        mtp_cycle_ms: B8Times::cycle_median(&b8.mtp),
        served_tok_s: b8.served_tokens as f64 / b8.served_s,
        served_acceptance: b8.accepted as f64 / b8.proposed.max(1) as f64,
    })
}

/// A step that was not timed (`--steps`) shows as NaN in the table and null in the JSON.
fn median_or_nan(v: Vec<f64>) -> f64 {
    if v.is_empty() { f64::NAN } else { median(v) }
}

pub fn run(args: BenchStepArgs) -> Result<()> {
    let routes = if args.gdn_routes.is_empty() {
        vec![if cohort_core::model::cuda::gdn_kernel::enabled() { GdnRoute::Kernel } else { GdnRoute::Ops }]
    } else {
        args.gdn_routes.clone()
    };
    let on_cuda = cohort_core::platform::backend::Backend::detect() == cohort_core::platform::backend::Backend::Cuda;
    anyhow::ensure!(
        !routes.iter().any(|r| matches!(r, GdnRoute::Kernel)) || on_cuda,
        "the fused Gated DeltaNet kernel needs MLX's CUDA backend"
    );
    for switch in KernelSwitch::all().into_iter().filter(|s| s.cuda_only()) {
        anyhow::ensure!(
            !switch.listed(&args).contains(&OnOff::On) || on_cuda,
            "{} on forces one of cohort's CUDA kernels, which needs MLX's CUDA backend",
            switch.flag()
        );
    }
    if let Some(kind) = args.profile_step {
        anyhow::ensure!(on_cuda, "--profile-step brackets a step for Nsight Compute, which needs MLX's CUDA backend");
        let needs = if kind == ProfiledStep::B1 { StepKind::B1 } else { StepKind::B8 };
        anyhow::ensure!(
            args.steps.contains(&needs),
            "--profile-step {} profiles a step that --steps leaves out: add {} to --steps",
            format!("{kind:?}").to_lowercase(),
            format!("{needs:?}").to_lowercase()
        );
    }
    let dtype = match &args.dtype {
        Some(d) => cohort_core::model::load::parse_dtype(d)?,
        None => cohort_core::model::load::default_dtype(),
    };
    if args.node_costs {
        let costs = super::node_costs::run(dtype)?;
        super::node_costs::print(&costs);
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_string_pretty(&costs)?)?;
        }
        return Ok(());
    }
    let t_load = Instant::now();
    let dir = match (&args.synthetic, &args.model) {
        (Some(_), _) => None,
        (None, Some(m)) => Some(cohort_core::model::load::resolve(m)?),
        (None, None) => Some(cohort_core::model::load::default_model()?),
    };
    let load = || -> Result<(Box<Qwen35Model>, Qwen35Config)> {
        Ok(match (&args.synthetic, &dir) {
            (Some(g), _) => {
                let cfg = crate::synth::geometry(g, args.layers, args.vocab)?;
                let mut w = crate::synth::make_weights(&cfg, dtype, 7)?;
                (Box::new(Qwen35Model::from_weights(cfg.clone(), &mut w, dtype)?), cfg)
            }
            (None, dir) => {
                let dir = dir.as_ref().context("no model folder")?;
                let cfg = Qwen35Config::load(&dir.join("config.json"))
                    .context("bench-step measures Qwen3.5-family models")?;
                (Box::new(Qwen35Model::load(dir, dtype)?), cfg)
            }
        })
    };
    let stackings: Vec<Option<OnOff>> =
        if args.stacking.is_empty() { vec![None] } else { args.stacking.iter().map(|&s| Some(s)).collect() };
    let mut models = Vec::new();
    let mut cfg = None;
    for &stacking in &stackings {
        let mut routes = cohort_core::model::routes::current();
        if let Some(s) = stacking {
            routes.stack_projections = s.on();
        }
        let (m, c) = cohort_core::model::routes::scoped(routes, load)?;
        models.push((stacking, m));
        cfg = Some(c);
    }
    let cfg = cfg.expect("at least one model");
    let model = &models[0].1;
    let tok = tokenizer_for(dir.as_deref(), cfg.vocab_size as usize)?;
    // Every step below runs under the first model's routes and the gate's verdict, as the engine serves
    // them (its prompt reads included).
    let _in_force = cohort_core::model::routes::enter(model.routes());
    let (served, said) = served_route(model.as_ref())?;
    let _in_force = cohort_core::model::routes::enter(model.routes().with_gate(served));
    println!("route the engine serves: {said}");
    let load_s = t_load.elapsed().as_secs_f64();
    let mem_loaded = MemoryStats::read();
    let bw = bandwidth_gbs()?;
    eprintln!("model ready in {load_s:.1} s ({} active); bandwidth {bw:.0} GB/s", human_bytes(mem_loaded.active));
    let compiled_arms = if args.compiled.is_empty() { vec![CompiledBlocks::current()] } else { args.compiled.clone() };
    let floor = |bytes: f64| bytes / (bw * 1e9) * 1e3;
    let mtp_cfg = {
        let mut c = cfg.clone();
        c.num_hidden_layers = 1;
        c.full_attention_interval = 1;
        c
    };
    let floors = report::Floors {
        b1: floor(step_bytes(&cfg, 1, true)),
        draft: floor(step_bytes(&mtp_cfg, FIXED_WIDTH as i64, true)),
        verify: floor(step_bytes(&cfg, 2 * FIXED_WIDTH as i64, true)),
        b8_ar: floor(step_bytes(&cfg, FIXED_WIDTH as i64, true)),
    };
    println!(
        "geometry: {} layers, hidden {}, {} experts top-{}, vocab {}",
        cfg.num_hidden_layers, cfg.hidden_size, cfg.num_experts, cfg.num_experts_per_tok, cfg.vocab_size
    );
    println!("memory bandwidth (1 GiB copy): {bw:.0} GB/s; weights resident: {}", human_bytes(mem_loaded.active));
    let mut all = Vec::new();
    let mut first_logits = None;
    for route in routes {
        for &attention in &args.attention {
            for &compiled in &compiled_arms {
                let mut routes = cohort_core::model::routes::current();
                routes.gdn_kernel = matches!(route, GdnRoute::Kernel);
                routes.batched_attention = matches!(attention, AttentionPath::Batched);
                compiled.apply(&mut routes);
                switches::apply_single_settings(&args, &mut routes);
                let _in_force = cohort_core::model::routes::enter(routes);
                eprintln!(
                    "measuring: {route:?} recurrence, {attention:?} cohort attention, compiled blocks: {compiled:?}"
                );
                let f = measure(model, &tok, &args, route, attention, compiled, &mut first_logits)?;
                // Each arm as soon as it is measured, so a run cut short keeps the arms before.
                report::print(&f, &floors, args.prefill, &args.steps);
                all.push(f);
            }
        }
    }
    if args.interleave_b1 {
        interleaved_b1(&models, &args, &compiled_arms)?;
    }
    if args.interleave_b8 {
        let arms: Vec<Arm> = arms(&models, &args, &compiled_arms).into_iter().filter(|a| a.model == 0).collect();
        interleaved_b8(model, &tok, &args, &arms)?;
    }
    println!("\npeak memory {}", human_bytes(MemoryStats::read().peak));
    if let [a, b] = &all[..] {
        println!(
            "\n{:?}+{:?}+{:?} / {:?}+{:?}+{:?} speed-up: prefill {:.2}x, B1 step {:.2}x, B8 draft {:.2}x, B8 verify {:.2}x",
            a.route,
            a.attention,
            a.compiled,
            b.route,
            b.attention,
            b.compiled,
            a.prefill_tok_s / b.prefill_tok_s,
            b.b1_ms / a.b1_ms,
            b.draft_ms / a.draft_ms,
            b.verify_ms / a.verify_ms
        );
    }
    if let Some(path) = &args.json {
        let j = serde_json::json!({"layers": cfg.num_hidden_layers, "bandwidth_gbs": bw, "prefill_tokens": args.prefill,
            "b1_floor_ms": floors.b1, "draft_floor_ms": floors.draft, "verify_floor_ms": floors.verify,
            "routes": all, "weights_bytes": mem_loaded.active, "peak_bytes": MemoryStats::read().peak, "load_s": load_s});
        std::fs::write(path, serde_json::to_string_pretty(&j)?)?;
    }
    Ok(())
}
