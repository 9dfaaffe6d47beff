//! bench-step's route arms: every route the switch table gives a bench flag
//! (`cohort_core::model::switches`, where each route is declared once: its field, environment
//! variable, defaults, flag and column). A flag lists the settings to time (`on`, `off` or
//! both); the interleaved arms cross every listed setting of every flag.

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use cohort_core::model::routes::Routes;
use cohort_core::model::switches::{SWITCHES, SwitchDoc};

use super::{BenchStepArgs, OnOff};

/// How many switches have an arm: an arm carries one setting of each.
pub(super) const COUNT: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < SWITCHES.len() {
        if SWITCHES[i].arm.is_some() {
            n += 1;
        }
        i += 1;
    }
    n
};

/// One switch with a bench arm.
#[derive(Clone, Copy, Debug)]
pub(super) struct KernelSwitch(&'static SwitchDoc);

impl KernelSwitch {
    /// Every switch with an arm, in the table's order (the order of an arm's settings and of the
    /// tables' columns).
    pub(super) fn all() -> [KernelSwitch; COUNT] {
        let all: Vec<KernelSwitch> = SWITCHES.iter().filter(|s| s.arm.is_some()).map(KernelSwitch).collect();
        all.try_into().expect("COUNT counts the switches with an arm")
    }

    fn flag_name(self) -> &'static str {
        self.0.arm.expect("a switch with an arm").flag
    }

    /// Whether turning it on asks for one of cohort's CUDA kernels.
    pub(super) fn cuda_only(self) -> bool {
        self.0.cuda_only
    }

    pub(super) fn flag(self) -> String {
        format!("--{}", self.flag_name())
    }

    pub(super) fn column(self) -> &'static str {
        self.0.arm.expect("a switch with an arm").column
    }

    /// The settings its flag listed (empty: the engine's default alone).
    pub(super) fn listed(self, args: &BenchStepArgs) -> &[OnOff] {
        args.arms.listed(self)
    }

    /// `routes` with it on or off (`None`: as they are, the engine's default).
    pub(super) fn apply(self, setting: Option<OnOff>, routes: &mut Routes) {
        let (Some(setting), Some(field)) = (setting, self.0.route) else { return };
        (field.set)(routes, setting == OnOff::On);
    }
}

/// The settings each arm flag listed, by flag: the flags are made from the switch table, so a
/// route declared there with an arm needs nothing here.
#[derive(Clone, Debug, Default)]
pub struct RouteArms {
    listed: Vec<(&'static str, Vec<OnOff>)>,
}

impl RouteArms {
    fn listed(&self, switch: KernelSwitch) -> &[OnOff] {
        let flag = switch.flag_name();
        self.listed.iter().find(|(f, _)| *f == flag).map_or(&[], |(_, settings)| settings.as_slice())
    }
}

impl FromArgMatches for RouteArms {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let listed = KernelSwitch::all()
            .iter()
            .map(|s| {
                let settings = matches.get_many::<OnOff>(s.flag_name()).map(|v| v.copied().collect());
                (s.flag_name(), settings.unwrap_or_default())
            })
            .collect();
        Ok(RouteArms { listed })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for RouteArms {
    fn augment_args(mut cmd: Command) -> Command {
        for s in KernelSwitch::all() {
            let help = format!(
                "{} ({}, default {}), timed on, off or both in the interleaved arms, each with every other arm setting",
                s.0.does, s.0.name, s.0.default
            );
            cmd = cmd.arg(
                Arg::new(s.flag_name())
                    .long(s.flag_name())
                    .value_name("on,off")
                    .value_delimiter(',')
                    .action(ArgAction::Append)
                    .value_parser(clap::builder::EnumValueParser::<OnOff>::new())
                    .help(help),
            );
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// `routes` with every switch that lists one setting alone set to it: the steps outside the
/// interleaved arms (the per-phase tables, and the step `--profile-step` brackets for Nsight
/// Compute) then run what the flag names; a switch listing both settings leaves them the default.
pub(super) fn apply_single_settings(args: &BenchStepArgs, routes: &mut Routes) {
    for switch in KernelSwitch::all() {
        if let [only] = switch.listed(args) {
            switch.apply(Some(*only), routes);
        }
    }
}

/// Every combination of the switches' listed settings (each switch's settings, or its default
/// alone), the first switch varying slowest.
pub(super) fn combinations(args: &BenchStepArgs) -> Vec<[Option<OnOff>; COUNT]> {
    let mut all = vec![[None; COUNT]];
    for (i, switch) in KernelSwitch::all().into_iter().enumerate() {
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

    /// Every arm flag comes from a route switch and turns its own field on and off alone, and
    /// the arms cross every listed setting.
    #[test]
    fn each_arm_flag_sets_its_own_route_and_the_arms_cross_every_setting() {
        let defaults = Routes::defaults(Backend::Cuda);
        for switch in KernelSwitch::all() {
            let field = switch.0.route.expect("an arm sets a route");
            for (setting, on) in [("on", true), ("off", false)] {
                let mut routes = defaults;
                apply_single_settings(&args(&[&switch.flag(), setting]), &mut routes);
                assert_eq!((field.get)(&routes), on, "{} {setting}", switch.flag());
                let mut back = routes;
                (field.set)(&mut back, (field.get)(&defaults));
                assert_eq!(back, defaults, "{} {setting} changed another route", switch.flag());
            }
        }
        let both = combinations(&args(&["--hand-over", "on,off", "--qk-kernel", "on,off", "--add-norm", "on"]));
        assert_eq!(both.len(), 4);
        assert!(both.iter().all(|arm| arm.iter().filter(|s| s.is_some()).count() == 3));
    }
}
