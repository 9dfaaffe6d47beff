//! The training run: distil (or load the cached distillation), initialise or resume the head,
//! then AdamW steps over random batches of distilled sequences with a progress bar, periodic
//! validation, checkpoints and real-cycle evaluations; finally the head is written in its shipped
//! storage and evaluated from that very file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use mlx_rs::error::Exception;
use mlx_rs::transforms::keyed_value_and_grad;
use mlx_rs::{Array, Dtype};
use serde::Serialize;

use super::checkpoint::{self, State};
use super::corpus::{self, Sources};
use super::distill::{self, Distilled};
use super::eval::{self, Figures};
use super::frozen::{self, Frozen};
use super::functional;
use super::head_file::{self, StoreAs};
use super::loss::{self, Objective, Targets};
use super::optim::Optim;
use super::params::{self, HeadDims, Params};
use super::progress::Progress;
use crate::engine::sampler::SamplerConfig;
use crate::engine::solo::GenerationMode;
use crate::model::families::llama::LlamaModel;
use crate::model::forward::LanguageModel;
use crate::model::ops::slice_axis;
use crate::model::routes::WeightPolicy;
use crate::model::routes::{self, Routes};
use crate::model::text::tokenizer::{ChatMessage, TextTokenizer};
use crate::platform::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// Decoder layer copied from the target's top layer, fc = [0 | I].
    Target,
    /// Small random weights.
    Random,
}

#[derive(Debug, Clone)]
pub struct TrainConfig {
    pub model_dir: PathBuf,
    pub out: PathBuf,
    pub data: Vec<PathBuf>,
    pub steps: usize,
    /// Stop after this many steps while keeping the schedule of `steps` (resume later).
    pub stop_at: Option<usize>,
    pub seq_len: usize,
    pub batch: usize,
    pub lr: f32,
    pub weight_decay: f32,
    pub warmup: usize,
    pub clip: f32,
    pub resume: Option<PathBuf>,
    pub seed: u64,
    pub objective: Objective,
    pub topk: usize,
    /// Weight of the feature-regression auxiliary (0 = off).
    pub feature_weight: f32,
    pub init: Init,
    /// Start from this head file instead of `init` (fine-tuning a shipped head).
    pub init_head: Option<PathBuf>,
    pub text_tokens: usize,
    pub chat_prompts: usize,
    /// Chat prompts of the seed's shuffle passed over before taking `chat_prompts` (slices).
    pub chat_skip: usize,
    pub answer_tokens: usize,
    pub sampled_fraction: f32,
    pub gen_batch: usize,
    pub distill_tokens: usize,
    pub cache: Option<PathBuf>,
    /// More distillation caches (from earlier runs on the same target) to train on as well.
    pub extra_data: Vec<PathBuf>,
    pub checkpoint_dir: PathBuf,
    pub checkpoint_every: usize,
    pub eval: Option<PathBuf>,
    pub eval_prompts: usize,
    pub eval_tokens: usize,
    pub eval_every: usize,
    pub eval_ar: bool,
    pub store: StoreAs,
    pub report: Option<PathBuf>,
}

impl TrainConfig {
    /// What must match for a distillation cache to be reused.
    fn data_settings(&self) -> String {
        format!(
            "model={} data={:?} seq_len={} text_tokens={} chat_prompts={} chat_skip={} answer_tokens={} sampled={} topk={} seed={}",
            self.model_dir.display(),
            self.data,
            self.seq_len,
            self.text_tokens,
            self.chat_prompts,
            self.chat_skip,
            self.answer_tokens,
            self.sampled_fraction,
            self.topk,
            self.seed
        )
    }

    /// What must match for a checkpoint to be resumed.
    fn run_settings(&self) -> String {
        format!(
            "{} objective={:?} batch={} steps={} lr={}",
            self.data_settings(),
            self.objective,
            self.batch,
            self.steps,
            self.lr
        )
    }
}

/// One training batch; `Clone` is cheap (arrays are shared).
#[derive(Clone)]
pub struct Batch {
    pub hidden: Array,
    pub tokens: Array,
    pub targets: Targets,
}

/// Rows of a [N, ...] array from `start` for `n`, zero-padded to `t` rows.
fn rows_padded(a: &Array, start: usize, n: usize, t: usize) -> Result<Array> {
    let x = slice_axis(a, 0, start as i32, (start + n) as i32)?;
    if n == t {
        return Ok(x);
    }
    let mut shape = a.shape().to_vec();
    shape[0] = (t - n) as i32;
    Ok(mlx_rs::ops::concatenate(&[x, mlx_rs::ops::zeros_dtype(&shape, a.dtype())?], 0)?)
}

/// The batch of sequences `picks`: a sequence of n tokens gives n-1 head positions, input
/// (h_j, x_{j+1}) and target the target's prediction at j+1, exactly the MTP history's pairing.
pub fn make_batch(d: &Distilled, picks: &[usize], with_topk: bool, with_next: bool) -> Result<Batch> {
    let t = picks.iter().map(|&i| d.seqs[i].1 - 1).max().unwrap_or(0).max(1);
    let (mut hs, mut toks, mut labels, mut mask, mut ti, mut tp) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut next = vec![];
    for &i in picks {
        let (s, n) = d.seqs[i];
        let m = n - 1;
        hs.push(rows_padded(&d.hidden, s, m, t)?.expand_dims(0)?);
        if with_next {
            next.push(rows_padded(&d.hidden, s + 1, m, t)?.expand_dims(0)?);
        }
        for j in 0..t {
            let ok = j < m;
            toks.push(if ok { d.ids[s + 1 + j] as i32 } else { 0 });
            labels.push(if ok { d.argmax[s + 1 + j] as i32 } else { 0 });
            mask.push(if ok { 1.0f32 } else { 0.0 });
        }
        if with_topk && let Some((a, b)) = &d.topk {
            ti.push(rows_padded(a, s + 1, m, t)?.expand_dims(0)?);
            tp.push(rows_padded(b, s + 1, m, t)?.expand_dims(0)?);
        }
    }
    let b = picks.len() as i32;
    let shape = [b, t as i32];
    let topk =
        if ti.is_empty() { None } else { Some((mlx_rs::ops::concatenate(&ti, 0)?, mlx_rs::ops::concatenate(&tp, 0)?)) };
    Ok(Batch {
        hidden: mlx_rs::ops::concatenate(&hs, 0)?,
        tokens: Array::from_slice(&toks, &shape),
        targets: Targets {
            labels: Array::from_slice(&labels, &shape),
            mask: Array::from_slice(&mask, &shape),
            topk,
            next_hidden: if next.is_empty() { None } else { Some(mlx_rs::ops::concatenate(&next, 0)?) },
        },
    })
}

/// What a run reports (also written to `--report`).
#[derive(Debug, Serialize)]
pub struct Summary {
    pub head: PathBuf,
    pub head_bytes: u64,
    pub store: StoreAs,
    pub objective: Objective,
    pub init: Init,
    pub steps: usize,
    pub batch: usize,
    pub seq_len: usize,
    pub lr: f32,
    pub sequences: usize,
    pub positions: usize,
    pub distill_s: f64,
    pub train_s: f64,
    /// Loss of the first step this run took (the untrained head, unless resumed).
    pub first_loss: f64,
    pub final_train_loss: f64,
    pub final_train_acc: f64,
    pub val_loss: f64,
    pub val_acc: f64,
    pub eval: Vec<Figures>,
}

fn ex(e: anyhow::Error) -> Exception {
    Exception::custom(format!("{e:#}"))
}

/// Load the target (dequantized float32, as the CPU runs it).
fn load_target(dir: &Path) -> Result<LlamaModel> {
    let routes = Routes { weights: WeightPolicy::Dequantize, ..routes::current() };
    routes::scoped(routes, || LlamaModel::load(dir, Dtype::Float32))
}

/// Distil the configured data with the target, or load it from the cache.
fn build_data(cfg: &TrainConfig) -> Result<Distilled> {
    let settings = cfg.data_settings();
    if let Some(c) = &cfg.cache
        && c.exists()
    {
        eprintln!("train-mtp: distilled data from {}", c.display());
        return Distilled::load(c, Some(&settings));
    }
    let model = load_target(&cfg.model_dir)?;
    let tok = TextTokenizer::load(&cfg.model_dir)?;
    let sources = Sources::from_paths(&cfg.data)?;
    if sources.text.is_empty() && sources.chat.is_empty() {
        bail!("no training data: give --data with .txt (text) or .jsonl (chat prompt) files");
    }
    let mut rng = Rng::new(cfg.seed);
    let windows = corpus::text_windows(&tok, &sources.text, cfg.seq_len, cfg.text_tokens / cfg.seq_len, &mut rng)?;
    // The prompts' shuffle has its own generator so that slices (--chat-skip) of one seed stay
    // disjoint whatever the text settings of each run.
    let mut chat_rng = Rng::new(cfg.seed ^ 0xC4A7);
    let prompts = corpus::chat_prompts(&sources.chat, cfg.chat_skip, cfg.chat_prompts, &mut chat_rng)?;
    let mut rendered = Vec::new();
    for p in &prompts {
        let ids = corpus::render_chat(&tok, p)?;
        if ids.len() + 16 <= cfg.seq_len {
            rendered.push(ids);
        }
    }
    let max_new: Vec<usize> = rendered.iter().map(|p| cfg.answer_tokens.min(cfg.seq_len - p.len())).collect();
    let mut eos = model.eos_ids();
    for &e in tok.eos_ids() {
        if !eos.contains(&e) {
            eos.push(e);
        }
    }
    eprintln!(
        "train-mtp: {} text windows of {} tokens, {} chat prompts ({} sampled at the default sampler, the rest greedy)",
        windows.len(),
        cfg.seq_len,
        rendered.len(),
        (rendered.len() as f32 * cfg.sampled_fraction).round() as usize
    );
    let split = (rendered.len() as f32 * cfg.sampled_fraction).round() as usize;
    let mut seqs = windows;
    if !rendered.is_empty() {
        let mut bar = Progress::new("answering", rendered.len());
        let mut answers = distill::answer(
            &model,
            &rendered[..split],
            &max_new[..split],
            &eos,
            SamplerConfig::default(),
            cfg.seed.wrapping_add(cfg.chat_skip as u64),
            cfg.gen_batch,
            &mut bar,
        )?;
        answers.extend(distill::answer(
            &model,
            &rendered[split..],
            &max_new[split..],
            &eos,
            SamplerConfig::greedy(),
            cfg.seed,
            cfg.gen_batch,
            &mut bar,
        )?);
        let answered: usize = answers.iter().zip(&rendered).map(|(a, p)| a.len() - p.len()).sum();
        bar.finish(rendered.len(), &format!("{answered} answer tokens"));
        seqs.extend(answers);
    }
    let mut bar = Progress::new("distilling", seqs.len());
    let d = distill::distill(&model, &seqs, cfg.distill_tokens, cfg.topk, &mut bar)?;
    bar.finish(seqs.len(), &format!("{} positions", d.positions()));
    if let Some(c) = &cfg.cache {
        d.save(c, &settings)?;
        eprintln!("train-mtp: distilled data cached in {}", c.display());
    }
    Ok(d)
}

/// Held-out prompts for the real-cycle evaluation.
fn eval_prompts(cfg: &TrainConfig) -> Result<Vec<Vec<ChatMessage>>> {
    Ok(match &cfg.eval {
        Some(f) => corpus::read_prompts(f)?.into_iter().take(cfg.eval_prompts).collect(),
        None => Vec::new(),
    })
}

/// Mean loss and accuracy over fixed validation batches.
fn validate(
    params: &Params,
    dims: &HeadDims,
    frozen: &Frozen,
    batches: &[Batch],
    objective: Objective,
) -> Result<(f64, f64)> {
    let (mut l, mut h, mut c) = (0.0, 0.0, 0.0);
    for b in batches {
        let logits = functional::head_logits(params, dims, frozen, &b.hidden, &b.tokens)?;
        let (loss, hits, count) = loss::loss(&logits, &b.targets, objective)?;
        mlx_rs::transforms::eval([&loss, &hits, &count])?;
        let n = count.item_cast::<f32>() as f64;
        l += loss.item_cast::<f32>() as f64 * n;
        h += hits.item_cast::<f32>() as f64;
        c += n;
    }
    Ok((l / c.max(1.0), h / c.max(1.0)))
}

fn quick_eval(cfg: &TrainConfig, params: &Params, dims: &HeadDims, prompts: &[Vec<ChatMessage>]) -> Result<Figures> {
    let path = cfg.checkpoint_dir.join("eval-head.safetensors");
    head_file::save(params, dims, StoreAs::F32, &HashMap::new(), &path)?;
    let model = eval::load_with_head(&cfg.model_dir, &path)?;
    let tok = TextTokenizer::load(&cfg.model_dir)?;
    let quick = &prompts[..prompts.len().min(4)];
    let f = eval::run_prompts(&model, &tok, quick, &eval::samplers(false), GenerationMode::Mtp, 64, cfg.seed)?;
    Ok(f.into_iter().next().unwrap_or_default())
}

pub fn run(cfg: &TrainConfig) -> Result<Summary> {
    if cfg.seq_len < 4 || cfg.batch == 0 || cfg.steps == 0 {
        bail!("--seq-len must be at least 4, --batch and --steps at least 1");
    }
    let t0 = Instant::now();
    let (llama_cfg, frozen, top) = frozen::load(&cfg.model_dir)?;
    let dims = HeadDims::from_llama(&llama_cfg);
    let mut data = build_data(cfg)?;
    for extra in &cfg.extra_data {
        data = data.merge(Distilled::load(extra, None)?)?;
        eprintln!("train-mtp: added {}: {} positions in all", extra.display(), data.positions());
    }
    let distill_s = t0.elapsed().as_secs_f64();
    if data.seqs.len() < 2 {
        bail!("too little data: {} distilled sequences", data.seqs.len());
    }
    let with_topk = cfg.objective == Objective::Kl;
    if with_topk && data.topk.is_none() {
        bail!("--objective kl needs the target's top-k distributions (--topk > 0)");
    }

    // A fixed validation split of whole sequences, never trained on.
    let mut order: Vec<usize> = (0..data.seqs.len()).filter(|&i| data.seqs[i].1 >= 2).collect();
    corpus::shuffle(&mut order, &mut Rng::new(cfg.seed ^ 0x5eed));
    let n_val = (order.len() / 50).clamp(1, 4 * cfg.batch);
    let (val_idx, train_idx) = order.split_at(n_val);
    let val_batches: Vec<Batch> =
        val_idx.chunks(cfg.batch).map(|c| make_batch(&data, c, with_topk, false)).collect::<Result<_>>()?;
    let with_next = cfg.feature_weight > 0.0;

    let mut optim = Optim::new(cfg.lr, cfg.weight_decay, cfg.warmup, cfg.steps, cfg.clip)?;
    let settings = cfg.run_settings();
    let (mut params, start) = match &cfg.resume {
        Some(dir) => {
            let (p, st) = checkpoint::load(dir, &dims, &mut optim, &settings)?;
            eprintln!("train-mtp: resumed from {} at step {}", dir.display(), st.step);
            (p, st.step)
        }
        None => (
            match (&cfg.init_head, cfg.init) {
                (Some(f), _) => head_file::load(f, &dims)?,
                (None, Init::Target) => params::init_from_target(&dims, &top)?,
                (None, Init::Random) => params::init_random(&dims, cfg.seed)?,
            },
            0,
        ),
    };
    drop(top);
    mlx_rs::transforms::eval(params::arrays(&params))?;
    eprintln!(
        "train-mtp: head of {:.2}M parameters; {} train / {} validation sequences, {} positions",
        dims.parameter_count() as f64 / 1e6,
        train_idx.len(),
        val_idx.len(),
        data.positions()
    );
    let prompts = eval_prompts(cfg)?;

    let frozen_ref = &frozen;
    let objective = cfg.objective;
    let feature_weight = cfg.feature_weight;
    let loss_fn = move |p: Params, b: Batch| -> mlx_rs::error::Result<Vec<Array>> {
        let states = functional::head_states(&p, &dims, frozen_ref, &b.hidden, &b.tokens).map_err(ex)?;
        let logits = mlx_rs::ops::matmul(&states, frozen_ref.head_weight().t())?;
        let (mut l, hits, count) = loss::loss(&logits, &b.targets, objective).map_err(ex)?;
        if let Some(next) = &b.targets.next_hidden {
            let f = loss::feature_loss(&states, next, &b.targets.mask).map_err(ex)?;
            l = l.add(f.multiply(Array::from_f32(feature_weight))?)?;
        }
        Ok(vec![l, hits, count])
    };
    let mut value_and_grad = keyed_value_and_grad(loss_fn);

    let mut bar = Progress::new("training", cfg.steps);
    let t_train = Instant::now();
    let (mut ema_loss, mut ema_acc, mut first_loss) = (f64::NAN, f64::NAN, f64::NAN);
    let mut positions = 0.0f64;
    let (mut val_loss, mut val_acc) = (f64::NAN, f64::NAN);
    let end = cfg.stop_at.unwrap_or(cfg.steps).min(cfg.steps);
    for step in start..end {
        // Batches come from a per-step seed so a resumed run draws the same ones.
        let mut rng = Rng::new(cfg.seed.wrapping_mul(0x9E37_79B9).wrapping_add(step as u64));
        let picks: Vec<usize> =
            (0..cfg.batch).map(|_| train_idx[(rng.next_u64() % train_idx.len() as u64) as usize]).collect();
        let batch = make_batch(&data, &picks, with_topk, with_next)?;
        let (vals, grads) = value_and_grad(params::clone_params(&params), batch)?;
        let norm = optim.step(&mut params, &grads, step)?;
        let mut to_eval = params::arrays(&params);
        to_eval.extend(optim.arrays());
        to_eval.extend(vals.iter());
        mlx_rs::transforms::eval(to_eval)?;
        let (l, hits, count) =
            (vals[0].item_cast::<f32>() as f64, vals[1].item_cast::<f32>() as f64, vals[2].item_cast::<f32>() as f64);
        positions += count;
        let acc = hits / count.max(1.0);
        let a = 0.05;
        if first_loss.is_nan() {
            first_loss = l;
        }
        ema_loss = if ema_loss.is_nan() { l } else { (1.0 - a) * ema_loss + a * l };
        ema_acc = if ema_acc.is_nan() { acc } else { (1.0 - a) * ema_acc + a * acc };
        let done = step + 1;
        let rate = positions / t_train.elapsed().as_secs_f64().max(1e-9);
        bar.update(
            done - start,
            &format!(
                "loss {ema_loss:.3} acc {ema_acc:.3} | grad {norm:.2} lr {:.1e} | {rate:.0} tok/s",
                optim.lr_at(step)
            ),
        );
        if done % cfg.eval_every.max(1) == 0 || done == end {
            (val_loss, val_acc) = validate(&params, &dims, &frozen, &val_batches, cfg.objective)?;
            let mut line = format!(
                "step {done}: train loss {ema_loss:.3} acc {ema_acc:.3}, val loss {val_loss:.3} acc {val_acc:.3}"
            );
            if !prompts.is_empty() && done != end {
                let f = quick_eval(cfg, &params, &dims, &prompts)?;
                line += &format!(", greedy acceptance {:.3} ({:.2} tokens/cycle)", f.acceptance, f.tokens_per_cycle);
            }
            eprintln!("\ntrain-mtp: {line}");
        }
        if cfg.checkpoint_every > 0 && (done % cfg.checkpoint_every == 0 || done == end) {
            let state = State {
                step: done,
                seed: cfg.seed,
                objective: format!("{:?}", cfg.objective),
                settings: settings.clone(),
            };
            checkpoint::save(&cfg.checkpoint_dir, &params, &dims, &mut optim, &state)?;
        }
    }
    let train_s = t_train.elapsed().as_secs_f64();
    bar.finish(end.saturating_sub(start), &format!("loss {ema_loss:.3} acc {ema_acc:.3}"));

    let meta = HashMap::from([
        ("format".to_owned(), "cohort-mtp-head".to_owned()),
        ("target".to_owned(), cfg.model_dir.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()),
        ("objective".to_owned(), format!("{:?}", cfg.objective).to_lowercase()),
        ("steps".to_owned(), end.to_string()),
    ]);
    head_file::save(&params, &dims, cfg.store, &meta, &cfg.out)?;
    let head_bytes = std::fs::metadata(&cfg.out).map(|m| m.len()).unwrap_or(0);
    eprintln!("train-mtp: wrote {} ({:.1} MB, {:?})", cfg.out.display(), head_bytes as f64 / 1e6, cfg.store);

    let mut figures = Vec::new();
    if !prompts.is_empty() {
        figures = evaluate_file(&cfg.model_dir, &cfg.out, &prompts, cfg.eval_tokens, cfg.seed, cfg.eval_ar)?;
    }
    let summary = Summary {
        head: cfg.out.clone(),
        head_bytes,
        store: cfg.store,
        objective: cfg.objective,
        init: cfg.init,
        steps: end,
        batch: cfg.batch,
        seq_len: cfg.seq_len,
        lr: cfg.lr,
        sequences: data.seqs.len(),
        positions: data.positions(),
        distill_s,
        train_s,
        first_loss,
        final_train_loss: ema_loss,
        final_train_acc: ema_acc,
        val_loss,
        val_acc,
        eval: figures,
    };
    if let Some(r) = &cfg.report {
        std::fs::write(r, serde_json::to_string_pretty(&summary)?)
            .with_context(|| format!("cannot write {}", r.display()))?;
    }
    Ok(summary)
}

/// The real MTP cycle with the head file installed: greedy and default sampler, and (with `ar`)
/// plain decoding on the same prompts for the speed comparison.
pub fn evaluate_file(
    dir: &Path,
    head: &Path,
    prompts: &[Vec<ChatMessage>],
    max_tokens: usize,
    seed: u64,
    ar: bool,
) -> Result<Vec<Figures>> {
    let model = eval::load_with_head(dir, head)?;
    let tok = TextTokenizer::load(dir)?;
    let mut out =
        eval::run_prompts(&model, &tok, prompts, &eval::samplers(true), GenerationMode::Mtp, max_tokens, seed)?;
    if ar {
        out.extend(eval::run_prompts(
            &model,
            &tok,
            prompts,
            &eval::samplers(false),
            GenerationMode::Ar,
            max_tokens,
            seed,
        )?);
    }
    for f in &out {
        eprintln!(
            "train-mtp: eval {} {}: acceptance {:.3}, {:.2} tokens/cycle, {:.1} decode tok/s ({} prompts, {} tokens)",
            f.mode, f.sampler, f.acceptance, f.tokens_per_cycle, f.decode_tok_s, f.prompts, f.tokens
        );
    }
    Ok(out)
}
