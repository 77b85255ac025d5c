//! `gconv validate`: the models' picks against the oracle on unseen problems.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use gconv_tune::find::FindOptions;

use super::{sweep_options, Context, FindArgs};
use crate::driver::ProblemChoice;
use crate::{learn, sweep};

#[derive(Debug, Args)]
pub struct ValidateCmd {
    /// The models to validate (default: as selection chooses them, see --models)
    #[arg(long = "model", value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Problems the models never saw: driver lines or keys, one per line
    #[arg(long, value_name = "FILE")]
    pub problems: PathBuf,
    #[command(flatten)]
    pub select: ProblemChoice,
    /// The sweep CSV of these problems: every candidate's time (the oracle's too); rows
    /// missing from it are measured now, by the sweep
    #[arg(long, value_name = "FILE")]
    pub measured: PathBuf,
    /// Sweep CSVs the models were trained on: validation refuses a problem whose shape is in them
    #[arg(long, value_name = "CSV", num_args = 1..)]
    pub training: Vec<PathBuf>,
    /// Write the charts (PNG and SVG) into this folder
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Write every problem's pick, oracle and vendor heuristic time into this CSV
    #[arg(long, value_name = "FILE")]
    pub picks: Option<PathBuf>,
    /// Measure nothing: evaluate only the rows already in --measured
    #[arg(long = "no-measure")]
    pub no_measure: bool,
    /// As sweep's: the oracle is then the best of the configs measured
    #[arg(long = "configs-per-solver", value_parser = clap::value_parser!(u64).range(1..))]
    pub configs_per_solver: Option<u64>,
    #[arg(long = "timeout-s", default_value_t = 60.0)]
    pub timeout_s: f64,
    #[command(flatten)]
    pub find: FindArgs,
}

/// The oracle's data: every candidate verified and fully timed, none stopped early.
fn every_candidate_in_full(find: &FindArgs, ctx: &Context<'_>) -> FindOptions {
    FindOptions { time_box: false, ..find.options(ctx.timing) }
}

pub fn run(ctx: &Context<'_>, cmd: ValidateCmd) -> anyhow::Result<ExitCode> {
    let set = learn::models_for(ctx.rt, cmd.model.as_deref().or(ctx.models))?
        .context("no model for this device: name one with --model DIR")?;
    let (problems, parsed) = cmd.select.problems(&cmd.problems, ctx.tf32)?;
    for (model, solvers) in set.unknown_solvers(ctx.rt, &problems) {
        eprintln!(
            "warning: {} ({}) never saw {} in training, which apply here: its picks leave them out",
            model.file_name(),
            model.device,
            solvers.join(", ")
        );
    }
    if !cmd.no_measure {
        let mut opts = sweep_options(
            ctx,
            cmd.measured.clone(),
            every_candidate_in_full(&cmd.find, ctx),
            cmd.timeout_s,
            Vec::new(),
        )?;
        opts.configs_per_solver = cmd.configs_per_solver.map(|n| n as usize);
        sweep::sweep(ctx.rt, ctx.device_line, &problems, &opts)?;
    }
    let args = learn::ValidateArgs {
        models: set,
        problems,
        measured: cmd.measured,
        training: cmd.training,
        plots: cmd.plots,
        picks: cmd.picks,
    };
    let code = learn::validate(&args)?;
    Ok(if parsed == ExitCode::SUCCESS { code } else { parsed })
}

#[cfg(test)]
mod tests {
    use gconv_core::Runtime;
    use gconv_heuristic::model::{probe_problems, ModelSet};

    #[test]
    fn the_built_in_cpu_models_know_every_cpu_solver() {
        let rt = gconv_cpu::CpuRuntime::detect();
        let sets = ModelSet::embedded().unwrap();
        let cpu: Vec<&ModelSet> =
            sets.iter().filter(|s| s.models.iter().all(|m| rt.owns_device_key(&m.device))).collect();
        assert!(!cpu.is_empty(), "a built-in CPU model set");
        for set in &cpu {
            assert!(set.unknown_solvers(&rt, &probe_problems()).is_empty(), "{}", set.origin);
        }
        let mut partial = cpu[0].clone();
        partial.models[0].spec.solvers.retain(|s| s != "cpu.depthwise");
        partial.models.iter_mut().for_each(|m| m.device = rt.device_key().to_string());
        let unknown: Vec<(String, Vec<&str>)> =
            partial.own_models_unknown(&rt).into_iter().map(|(m, ids)| (m.file_name(), ids)).collect();
        assert_eq!(unknown, vec![(partial.models[0].file_name(), vec!["cpu.depthwise"])]);
    }
}
