//! `cohort inspect`: what a model directory holds, without running it.

use anyhow::Result;
use clap::Args;

use crate::model::config::{LayerKind, Qwen35Config};
use crate::model::formats::weights::{shard_files, validate_safetensors};
use crate::model::load::auto_weight_policy;
use crate::platform::backend::human_bytes;

#[derive(Args)]
pub struct InspectArgs {
    /// Model directory or hub repo id in the local HF cache (default: the imported default model).
    #[arg(long, short = 'm')]
    model: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: InspectArgs) -> Result<()> {
    let dir = match &args.model {
        Some(m) => crate::model::load::resolve(m)?,
        None => crate::model::load::default_model()?,
    };
    if crate::model::load::model_type(&dir)? == "llama" {
        return inspect_llama(&dir, args.json);
    }
    let cfg = Qwen35Config::load(&dir.join("config.json"))?;
    let mut files = shard_files(&dir)?;
    let sidecar = dir.join("mtp.safetensors");
    if sidecar.exists() {
        files.push(sidecar.clone());
    }
    let (mut params, mut bytes, mut mtp_tensors) = (0u64, 0u64, 0usize);
    let mut quantized = 0usize;
    for f in &files {
        bytes += std::fs::metadata(f)?.len();
        for (name, (dtype, shape)) in validate_safetensors(f)? {
            let n: u64 = shape.iter().map(|&d| d as u64).product();
            // Packed uint32 words hold 32/bits weights each; count the weights, not the words.
            let per_word = if dtype == "U32" {
                let spec = cfg.quantization.for_module(name.trim_end_matches(".weight"));
                spec.map(|s| 32 / s.bits as u64).unwrap_or(8)
            } else {
                1
            };
            if name.ends_with(".scales") || name.ends_with(".biases") {
                continue;
            }
            if dtype == "U32" {
                quantized += 1;
            }
            if name.contains("mtp.") {
                mtp_tensors += 1;
            }
            params += n * per_word;
        }
    }
    let kinds: Vec<LayerKind> = (0..cfg.num_hidden_layers).map(|i| cfg.layer_kind(i)).collect();
    let linear = kinds.iter().filter(|k| **k == LayerKind::GatedDelta).count();
    let full = kinds.len() - linear;
    let quant = cfg
        .quantization
        .default
        .map(|q| format!("affine {}-bit group {}", q.bits, q.group_size))
        .unwrap_or_else(|| "none".into());
    let overrides = cfg.quantization.overrides.len();
    if args.json {
        let json = serde_json::json!({
            "dir": dir, "model_type": cfg.model_type, "layers": kinds.len(), "gated_deltanet_layers": linear,
            "full_attention_layers": full, "moe": cfg.is_moe(), "experts": cfg.num_experts, "experts_per_token": cfg.num_experts_per_tok,
            "hidden_size": cfg.hidden_size, "vocab_size": cfg.vocab_size, "quantization": quant, "quantization_overrides": overrides,
            "quantized_tensors": quantized, "parameters": params, "bytes_on_disk": bytes, "mtp_weights": mtp_tensors > 0,
            "mtp_tensors": mtp_tensors, "context_window": cfg.max_position_embeddings, "weights_auto": auto_weight_policy(&dir),
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!("model        {}", dir.display());
    println!("family       {} ({})", cfg.model_type, if cfg.is_moe() { "MoE" } else { "dense MLP" });
    println!("layers       {} = {linear} Gated DeltaNet + {full} gated full attention", kinds.len());
    if cfg.is_moe() {
        println!(
            "experts      {} routed, top-{}, intermediate {}, shared expert {}",
            cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size
        );
    }
    println!(
        "geometry     hidden {}, heads {}/{} (head {}), vocab {}",
        cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size
    );
    println!("quantization {quant} ({overrides} per-module overrides, {quantized} quantized tensors)");
    println!(
        "parameters   {:.2} M ({} on disk in {} files)",
        params as f64 / 1e6,
        human_bytes(bytes as usize),
        files.len()
    );
    println!("memory       ~{} for weights at load (+ KV and state per row)", human_bytes(bytes as usize));
    println!(
        "MTP          {}",
        if mtp_tensors > 0 { format!("present ({mtp_tensors} tensors)") } else { "absent".into() }
    );
    println!("context      {} positions", cfg.max_position_embeddings);
    println!("weights      {}", describe_weights(&dir));
    Ok(())
}

/// The weight policy `--weights auto` picks for this model on this machine, and what it means.
fn describe_weights(dir: &std::path::Path) -> String {
    use crate::model::routes::WeightPolicy;
    let policy = auto_weight_policy(dir);
    let what = match policy {
        WeightPolicy::Kernel => {
            "float32 copy for prefill + the codes for cohort's CPU kernel (decode, drafts, verifies)"
        }
        WeightPolicy::Dequantize => "dequantized once to float32 (products on BLAS)",
        WeightPolicy::Quantized => "kept as stored",
    };
    format!("{} here with --weights auto: {what}", policy.name())
}

fn inspect_llama(dir: &std::path::Path, json: bool) -> Result<()> {
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
    let files = shard_files(dir)?;
    let mut bytes = 0u64;
    for f in &files {
        bytes += std::fs::metadata(f)?.len();
        validate_safetensors(f)?;
    }
    let mtp = dir.join("mtp.safetensors").exists();
    let get = |k: &str| cfg.get(k).cloned().unwrap_or(serde_json::Value::Null);
    if json {
        let out = serde_json::json!({"dir": dir, "model_type": "llama", "layers": get("num_hidden_layers"), "hidden_size": get("hidden_size"),
            "heads": get("num_attention_heads"), "kv_heads": get("num_key_value_heads"), "vocab_size": get("vocab_size"),
            "quantization": get("quantization"), "bytes_on_disk": bytes, "mtp_weights": mtp, "context_window": get("max_position_embeddings"),
            "weights_auto": auto_weight_policy(dir)});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("model        {}", dir.display());
    println!("family       llama (dense attention + SwiGLU MLP)");
    println!("layers       {} full attention", get("num_hidden_layers"));
    println!(
        "geometry     hidden {}, heads {}/{}, vocab {}",
        get("hidden_size"),
        get("num_attention_heads"),
        get("num_key_value_heads"),
        get("vocab_size")
    );
    println!("quantization {}", get("quantization"));
    println!("on disk      {} in {} files", human_bytes(bytes as usize), files.len());
    println!("MTP          {}", if mtp { "present (mtp.safetensors)" } else { "absent" });
    println!("context      {} positions", get("max_position_embeddings"));
    println!("weights      {}", describe_weights(dir));
    Ok(())
}
