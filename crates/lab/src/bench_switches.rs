//! The switches of cohort's CUDA kernels that `bench-step`'s interleaved arms turn on or off,
//! each with its flag, its table column and the `Routes` fields it sets: one list, so a new
//! kernel is one more row here rather than one more nested loop, field and column in each table.

use super::bench_step::{BenchStepArgs, OnOff};
use cohort_core::model::routes::Routes;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum KernelSwitch {
    /// The MoE router and the Gated DeltaNet mixer's fused front.
    Fused,
    /// The MoE expert kernels.
    Experts,
    /// The residual sum and RMSNorm kernel.
    AddNorm,
    /// The mixer's gated norm folded into its fused front.
    MixerNorm,
    /// The short-block cohort attention kernel.
    Attention,
    /// Reshapes around the invariant route's products.
    ProductViews,
    /// The fused front reading a verify's mixer states in place.
    StateInPlace,
    /// The expert kernels' first half on the tensor cores.
    ExpertsMma,
    /// An attention layer's query and key norm and RoPE as one kernel.
    QkNormRope,
    /// A step's graph handed to the device every few layers.
    HandOver,
}

/// How many switches an arm carries, one setting each.
pub(super) const COUNT: usize = 10;

impl KernelSwitch {
    /// Every switch, in the order of an arm's settings and of the tables' columns.
    pub(super) const ALL: [KernelSwitch; COUNT] = [
        KernelSwitch::Fused,
        KernelSwitch::Experts,
        KernelSwitch::AddNorm,
        KernelSwitch::MixerNorm,
        KernelSwitch::Attention,
        KernelSwitch::ProductViews,
        KernelSwitch::StateInPlace,
        KernelSwitch::ExpertsMma,
        KernelSwitch::QkNormRope,
        KernelSwitch::HandOver,
    ];

    /// Whether turning it on asks for one of cohort's CUDA kernels (the hand-over runs anywhere).
    pub(super) fn cuda_only(self) -> bool {
        self != KernelSwitch::HandOver
    }

    pub(super) fn flag(self) -> &'static str {
        match self {
            KernelSwitch::Fused => "--fused-kernels",
            KernelSwitch::Experts => "--experts-kernel",
            KernelSwitch::AddNorm => "--add-norm",
            KernelSwitch::MixerNorm => "--mixer-norm",
            KernelSwitch::Attention => "--attention-kernel",
            KernelSwitch::ProductViews => "--product-views",
            KernelSwitch::StateInPlace => "--state-in-place",
            KernelSwitch::ExpertsMma => "--experts-mma",
            KernelSwitch::QkNormRope => "--qk-kernel",
            KernelSwitch::HandOver => "--hand-over",
        }
    }

    pub(super) fn column(self) -> &'static str {
        match self {
            KernelSwitch::Fused => "fused kernels",
            KernelSwitch::Experts => "expert kernels",
            KernelSwitch::AddNorm => "add-norm kernel",
            KernelSwitch::MixerNorm => "mixer norm",
            KernelSwitch::Attention => "attention kernel",
            KernelSwitch::ProductViews => "product views",
            KernelSwitch::StateInPlace => "state in place",
            KernelSwitch::ExpertsMma => "experts on tensor cores",
            KernelSwitch::QkNormRope => "q/k norm and RoPE kernel",
            KernelSwitch::HandOver => "hand-over every 4 layers",
        }
    }

    /// The settings its flag listed (empty: the engine's default alone).
    pub(super) fn listed(self, args: &BenchStepArgs) -> &[OnOff] {
        match self {
            KernelSwitch::Fused => &args.fused_kernels,
            KernelSwitch::Experts => &args.experts_kernel,
            KernelSwitch::AddNorm => &args.add_norm,
            KernelSwitch::MixerNorm => &args.mixer_norm,
            KernelSwitch::Attention => &args.attention_kernel,
            KernelSwitch::ProductViews => &args.product_views,
            KernelSwitch::StateInPlace => &args.state_in_place,
            KernelSwitch::ExpertsMma => &args.experts_mma,
            KernelSwitch::QkNormRope => &args.qk_kernel,
            KernelSwitch::HandOver => &args.hand_over,
        }
    }

    /// `routes` with it on or off (`None`: as they are, the engine's default).
    pub(super) fn apply(self, setting: Option<OnOff>, routes: &mut Routes) {
        let Some(setting) = setting else { return };
        let on = setting == OnOff::On;
        match self {
            KernelSwitch::Fused => (routes.router_kernel, routes.gdn_fused_front) = (on, on),
            KernelSwitch::Experts => routes.moe_kernel = on,
            KernelSwitch::AddNorm => routes.add_norm_kernel = on,
            KernelSwitch::MixerNorm => routes.gdn_fused_norm = on,
            KernelSwitch::Attention => routes.attention_kernel = on,
            KernelSwitch::ProductViews => routes.product_views = on,
            KernelSwitch::StateInPlace => routes.gdn_state_in_place = on,
            KernelSwitch::ExpertsMma => routes.moe_up_mma = on,
            KernelSwitch::QkNormRope => routes.qk_norm_rope_kernel = on,
            KernelSwitch::HandOver => routes.hand_over_layers = on,
        }
    }
}

/// `routes` with every switch that lists one setting alone set to it: the steps outside the
/// interleaved arms (the per-phase tables, and the step `--profile-step` brackets for Nsight
/// Compute) then run what the flag names; a switch listing both settings leaves them the default.
pub(super) fn apply_single_settings(args: &BenchStepArgs, routes: &mut Routes) {
    for switch in KernelSwitch::ALL {
        if let [only] = switch.listed(args) {
            switch.apply(Some(*only), routes);
        }
    }
}

/// Every combination of the switches' listed settings (each switch's settings, or its default
/// alone), the first switch varying slowest.
pub(super) fn combinations(args: &BenchStepArgs) -> Vec<[Option<OnOff>; COUNT]> {
    let mut all = vec![[None; COUNT]];
    for (i, switch) in KernelSwitch::ALL.into_iter().enumerate() {
        let listed = switch.listed(args);
        if listed.is_empty() {
            continue;
        }
        all = all
            .into_iter()
            .flat_map(|settings| {
                listed.iter().map(move |&s| {
                    let mut next = settings;
                    next[i] = Some(s);
                    next
                })
            })
            .collect();
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use cohort_core::platform::backend::Backend;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchStepArgs,
    }

    fn args(flags: &[&str]) -> BenchStepArgs {
        Cli::try_parse_from(std::iter::once("bench-step").chain(flags.iter().copied())).expect("flags parse").args
    }

    /// A profiled step under `--experts-mma on` ran the scalar kernel: the switch reached only the
    /// interleaved arms, so Nsight Compute timed the wrong kernel.
    #[test]
    fn a_switch_with_one_setting_sets_the_steps_outside_the_arms() {
        let defaults = Routes::defaults(Backend::Cuda);
        let mut routes = defaults;
        apply_single_settings(&args(&["--experts-mma", "on", "--state-in-place", "off"]), &mut routes);
        assert!(routes.moe_up_mma && !defaults.moe_up_mma);
        assert!(!routes.gdn_state_in_place && defaults.gdn_state_in_place);
        assert_eq!(Routes { moe_up_mma: false, gdn_state_in_place: true, ..routes }, defaults);
    }

    #[test]
    fn a_switch_listing_both_settings_leaves_the_default() {
        let defaults = Routes::defaults(Backend::Cuda);
        let mut routes = defaults;
        apply_single_settings(&args(&["--experts-mma", "on,off", "--attention-kernel", "off,on"]), &mut routes);
        assert_eq!(routes, defaults);
    }
}
