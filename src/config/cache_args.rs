//! The prompt cache's flags, shared by the TUI, `generate` and `serve`.

use anyhow::{Result, bail};
use clap::Args;

use crate::engine::prompt_cache::{AnswerPolicy, CacheConfig, ReusePolicy};

#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct PromptCacheArgs {
    /// The prompt cache: exact (the default: a conversation's next turn resumes from the state its
    /// last one reached, where a resumed read gives the bits of a fresh one), inexact (resume
    /// everywhere; results say `reuse: inexact` where not exact), or off.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub prompt_cache: Option<ReusePolicy>,
    /// Bytes of row state the prompt cache may hold (e.g. 512M, 2G; 0 turns it off). Default: 1G.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub prompt_cache_bytes: Option<u64>,
    /// How a finished answer reaches the cache: decoded (the default: kept as the row decoded it,
    /// where the engine's start-up check finds that gives the bits of a fresh read, so a turn sent
    /// at once resumes after the answer; read back elsewhere) or read-back (always read again
    /// while the engine is idle).
    #[arg(long, value_enum, value_name = "HOW")]
    pub prompt_cache_answers: Option<AnswerPolicy>,
}

impl PromptCacheArgs {
    /// `base` with these flags applied.
    pub fn apply(&self, base: CacheConfig) -> CacheConfig {
        CacheConfig {
            policy: self.prompt_cache.unwrap_or(base.policy),
            bytes: self.prompt_cache_bytes.unwrap_or(base.bytes),
            answers: self.prompt_cache_answers.unwrap_or(base.answers),
        }
    }
}

/// A byte count: digits with an optional K, M, G or T (powers of 1024; `B` and `iB` allowed).
pub fn parse_bytes(text: &str) -> Result<u64> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let digits = upper.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &upper[digits.len()..];
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => bail!("{text:?}: a byte count is digits with an optional K, M, G or T (2G, 512M)"),
    };
    let Ok(n) = digits.trim().parse::<u64>() else {
        bail!("{text:?}: a byte count is digits with an optional K, M, G or T (2G, 512M)")
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| anyhow::anyhow!("{text:?}: more bytes than a 64-bit count holds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse_with_units_and_refuse_nonsense_and_overflow() {
        assert_eq!(parse_bytes("0").unwrap(), 0);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("512M").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("2g").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        for bad in ["", "G", "-1", "1.5G", "12Q", "lots"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert!(parse_bytes("99999999999T").unwrap_err().to_string().contains("64-bit"));
    }

    #[test]
    fn flags_override_the_profiles_cache_settings() {
        let base = CacheConfig { policy: ReusePolicy::Exact, bytes: 7, answers: AnswerPolicy::ReadBack };
        assert_eq!(PromptCacheArgs::default().apply(base), base);
        let flags = PromptCacheArgs {
            prompt_cache: Some(ReusePolicy::Off),
            prompt_cache_bytes: Some(9),
            prompt_cache_answers: Some(AnswerPolicy::Decoded),
        };
        assert_eq!(
            flags.apply(base),
            CacheConfig { policy: ReusePolicy::Off, bytes: 9, answers: AnswerPolicy::Decoded }
        );
    }
}
