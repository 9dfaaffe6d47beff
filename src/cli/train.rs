//! `cohort train-mtp`: train the generic depth-one MTP head of a Llama-family model by
//! self-distillation (crates/core/src/train, docs/mtp-head.md), write it as an `mtp.safetensors`-style file
//! and evaluate it through the real MTP cycle on held-out prompts.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

use crate::train::head_file::StoreAs;
use crate::train::loss::Objective;
use crate::train::trainer::{self, Init, TrainConfig};

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    /// Target model directory (Llama family; default: the imported SmolLM2-135M-Instruct).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Where the trained head goes (a safetensors file the engine loads as mtp.safetensors).
    #[arg(long)]
    pub out: PathBuf,
    /// Training data: .txt files (one document a line) and .jsonl chat prompts ({"prompt": ...}),
    /// or directories of them. Repeatable.
    #[arg(long, num_args = 1.., required_unless_present = "evaluate_only")]
    pub data: Vec<PathBuf>,
    /// Optimizer steps.
    #[arg(long, default_value_t = 1500)]
    pub steps: usize,
    /// Stop after this many steps, keeping the schedule of --steps (continue with --resume).
    #[arg(long)]
    pub stop_at: Option<usize>,
    /// Tokens per training sequence (text windows, and the cap on prompt + answer).
    #[arg(long, default_value_t = 256)]
    pub seq_len: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 2)]
    pub batch: usize,
    /// Peak learning rate (AdamW, warm-up then cosine).
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f32,
    #[arg(long, default_value_t = 0.01)]
    pub weight_decay: f32,
    #[arg(long, default_value_t = 50)]
    pub warmup: usize,
    /// Global gradient-norm clip.
    #[arg(long, default_value_t = 1.0)]
    pub clip: f32,
    /// Continue from a checkpoint directory.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// ce: cross-entropy on the target's argmax; kl: to the target's top-k distribution.
    #[arg(long, value_enum, default_value = "ce")]
    pub objective: Objective,
    /// Target probabilities kept per position (for --objective kl).
    #[arg(long, default_value_t = 32)]
    pub topk: usize,
    /// Weight of the auxiliary loss regressing the head's state onto the target's next hidden
    /// state (relative squared error; 0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub feature_weight: f32,
    /// Head initialisation (random trained faster than a copy of the target's top layer here).
    #[arg(long, value_enum, default_value = "random")]
    pub init: Init,
    /// Start from an existing head file instead (fine-tuning; any storage, dequantized).
    #[arg(long)]
    pub init_head: Option<PathBuf>,
    /// Text tokens to distil (cut into --seq-len windows).
    #[arg(long, default_value_t = 200_000)]
    pub text_tokens: usize,
    /// Chat prompts the target answers (its answers are training data).
    #[arg(long, default_value_t = 400)]
    pub chat_prompts: usize,
    /// Pass over this many prompts of the seed's shuffle first: runs with one --seed and
    /// successive skips answer disjoint slices of the prompts (one cache each, --extra-data).
    #[arg(long, default_value_t = 0)]
    pub chat_skip: usize,
    /// Longest answer per chat prompt.
    #[arg(long, default_value_t = 192)]
    pub answer_tokens: usize,
    /// Share of chat answers sampled at the default sampler (the rest greedy).
    #[arg(long, default_value_t = 0.5)]
    pub sampled_fraction: f32,
    /// Rows answering together.
    #[arg(long, default_value_t = 16)]
    pub gen_batch: usize,
    /// Positions per teacher-forced target pass.
    #[arg(long, default_value_t = 2048)]
    pub distill_tokens: usize,
    /// Distilled data cache (safetensors): read when present, written otherwise.
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Further distillation caches (other runs' --cache on the same target) to train on too.
    #[arg(long, num_args = 1..)]
    pub extra_data: Vec<PathBuf>,
    /// Checkpoint directory (default: OUT with .ckpt).
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 250)]
    pub checkpoint_every: usize,
    /// Held-out chat prompts (.jsonl) for the real-cycle evaluation.
    #[arg(long)]
    pub eval: Option<PathBuf>,
    #[arg(long, default_value_t = 16)]
    pub eval_prompts: usize,
    #[arg(long, default_value_t = 128)]
    pub eval_tokens: usize,
    /// Validation (and a quick 4-prompt greedy cycle check) every N steps.
    #[arg(long, default_value_t = 250)]
    pub eval_every: usize,
    /// Also decode the held-out prompts without MTP, for the speed comparison.
    #[arg(long)]
    pub eval_ar: bool,
    /// Storage of the written head: f32, bf16, q8 (8-bit g64) or q4 (4-bit g32).
    #[arg(long, value_enum, default_value = "bf16")]
    pub store: StoreAs,
    /// Write the run's summary (JSON) here as well as to stdout.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Do not train: evaluate the head at --out on --eval (after writing --init-head there in
    /// --store's storage, when given: how a float32 head becomes the shipped bf16 or 8-bit file).
    #[arg(long)]
    pub evaluate_only: bool,
}

pub fn run(args: TrainArgs) -> Result<()> {
    let model_dir = match &args.model {
        Some(m) => crate::model::load::resolve(m)?,
        None => crate::model::load::default_model()?,
    };
    if !crate::model::families::llama::is_llama_dir(&model_dir) {
        bail!("{}: train-mtp supports Llama-family targets (model_type \"llama\")", model_dir.display());
    }
    if args.evaluate_only {
        if let Some(src) = &args.init_head {
            let cfg = crate::model::families::llama::LlamaConfig::load(&model_dir.join("config.json"))?;
            let dims = crate::train::params::HeadDims::from_llama(&cfg);
            let head = crate::train::head_file::load(src, &dims)?;
            let meta = std::collections::HashMap::from([
                ("format".to_owned(), "cohort-mtp-head".to_owned()),
                ("converted_from".to_owned(), src.display().to_string()),
            ]);
            crate::train::head_file::save(&head, &dims, args.store, &meta, &args.out)?;
            eprintln!("train-mtp: wrote {} ({:?})", args.out.display(), args.store);
        }
        let Some(eval) = args.eval.as_ref() else { return Ok(()) };
        let prompts: Vec<_> = crate::train::corpus::read_prompts(eval)?.into_iter().take(args.eval_prompts).collect();
        let figures =
            trainer::evaluate_file(&model_dir, &args.out, &prompts, args.eval_tokens, args.seed, args.eval_ar)?;
        let json = serde_json::to_string_pretty(&figures)?;
        if let Some(report) = &args.report {
            std::fs::write(report, &json)
                .map_err(|e| anyhow::anyhow!("cannot write the report to {}: {e}", report.display()))?;
        }
        println!("{json}");
        return Ok(());
    }
    let checkpoint_dir = args.checkpoint_dir.clone().unwrap_or_else(|| args.out.with_extension("ckpt"));
    let cfg = TrainConfig {
        model_dir,
        out: args.out,
        data: args.data,
        steps: args.steps,
        stop_at: args.stop_at,
        seq_len: args.seq_len,
        batch: args.batch,
        lr: args.lr,
        weight_decay: args.weight_decay,
        warmup: args.warmup,
        clip: args.clip,
        resume: args.resume,
        seed: args.seed,
        objective: args.objective,
        topk: args.topk,
        feature_weight: args.feature_weight,
        init: args.init,
        init_head: args.init_head,
        text_tokens: args.text_tokens,
        chat_prompts: args.chat_prompts,
        chat_skip: args.chat_skip,
        answer_tokens: args.answer_tokens,
        sampled_fraction: args.sampled_fraction.clamp(0.0, 1.0),
        gen_batch: args.gen_batch,
        distill_tokens: args.distill_tokens,
        cache: args.cache,
        extra_data: args.extra_data,
        checkpoint_dir,
        checkpoint_every: args.checkpoint_every,
        eval: args.eval,
        eval_prompts: args.eval_prompts,
        eval_tokens: args.eval_tokens,
        eval_every: args.eval_every,
        eval_ar: args.eval_ar,
        store: args.store,
        report: args.report,
    };
    let summary = trainer::run(&cfg)?;
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(())
}
