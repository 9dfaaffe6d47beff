//! The default command's options (the TUI). Flags override the profile's values.

use clap::Args;

use crate::config::profile::Overrides;

#[derive(Args, Debug, Clone, Default)]
pub struct TuiArgs {
    /// Ask PROMPT once instead of opening the TUI: the answer streams to stdout, then cohort
    /// exits (no terminal needed). `-` reads the prompt from stdin. A prompt that is a
    /// subcommand's name, or starts with `-`, goes after `--`: `cohort -- serve`.
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,
    /// Profile: a name (built in: throughput, balanced, b1-exact, latency; or one of yours in
    /// <config dir>/profiles) or a path to a .toml file. Default: your "default" profile, else
    /// throughput.
    #[arg(long, short = 'p', value_name = "NAME|PATH")]
    pub profile: Option<String>,
    /// Theme: dark, light, one of yours in <config dir>/themes, or a path. Overrides the profile.
    #[arg(long, value_name = "NAME|PATH")]
    pub theme: Option<String>,
    /// Reopen a session's transcripts and carry on: the newest session, or the one named.
    #[arg(long, value_name = "SESSION", num_args = 0..=1, default_missing_value = LATEST)]
    pub resume: Option<String>,
    /// Model directory (or hub repo id in the local HF cache). Overrides the profile's `model`.
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Activation dtype (default: float32 on the CPU, bfloat16 on GPUs). Overrides the profile.
    #[arg(long)]
    pub dtype: Option<String>,
    /// Panes to open (1-8). Overrides the profile.
    #[arg(long)]
    pub panes: Option<usize>,
    /// Chat through a running `cohort serve` (http://HOST:PORT) instead of loading a model: the
    /// panes use its API, the inspector shows its engine.
    #[arg(long, value_name = "URL", conflicts_with_all = ["model", "dtype"])]
    pub attach: Option<String>,
    /// The server's API key, for --attach.
    #[arg(long, env = "COHORT_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    #[command(flatten)]
    pub prompt_cache: crate::config::cache_args::PromptCacheArgs,
}

/// `--resume` without a session name.
pub const LATEST: &str = "latest";

impl TuiArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            model: self.model.clone(),
            dtype: self.dtype.clone(),
            theme: self.theme.clone(),
            panes: self.panes,
            prompt_cache: self.prompt_cache.clone(),
        }
    }
}
