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
    let args =
        learn::ValidateArgs { models: set, problems, measured: cmd.measured, training: cmd.training, plots: cmd.plots };
    let code = learn::validate(&args)?;
    Ok(if parsed == ExitCode::SUCCESS { code } else { parsed })
}

#[cfg(test)]
mod tests {
    use gconv_core::{ConvProblem, Runtime};
    use gconv_heuristic::model::{Model, ModelSet};

    /// Shapes on which every solver of both backends applies in some direction and dtype.
    const SHAPES: [&str; 9] = [
        "NHWC:n3:c8:k12:i5x7:f1x1:s1x1:p0x0:d1x1:g2",
        "NHWC:n3:c16:k24:i5x7:f1x1:s1x1:p0x0:d1x1",
        "NHWC:n2:c16:k16:i11x9:f5x5:s1x2:p2x2:d1x1:g16",
        "NHWC:n2:c32:k32:i9x7:f3x3:s1x1:p1x1:d1x1:g4",
        "NHWC:n2:c16:k32:i9x9:f3x3:s2x2:p1x1:d1x1:g4",
        "NHWC:n2:c64:k64:i9x9:f3x3:s1x1:p1x1:d1x1",
        "NHWC:n2:c128:k128:i8x8:f3x3:s1x1:p1x1:d1x1:g2",
        "NCHW:n2:c6:k6:i9x9:f3x3:s2x2:p1x1:d1x1:g6",
        "NDHWC:n1:c8:k8:i4x6x6:f3x3x3:s1x1x1:p1x1x1:d1x1x1:g8",
    ];

    /// Every shape in every direction and data type.
    fn probes() -> Vec<ConvProblem> {
        let mut out = Vec::new();
        for dir in ["fwd", "bwd-data", "bwd-weight"] {
            for dtype in ["f32", "f16", "bf16"] {
                out.extend(SHAPES.iter().map(|s| ConvProblem::from_key(&format!("v1:{dir}:{dtype}:{s}")).unwrap()));
            }
        }
        out
    }

    /// The models of the set trained on `rt`'s device (by name: another library version
    /// counts), each with the registered solvers it never saw that apply to a probe.
    fn own_models_unknown<'s>(set: &'s ModelSet, rt: &dyn Runtime) -> Vec<(&'s Model, Vec<&'static str>)> {
        let name = |key: &str| key.split(':').nth(1).unwrap_or_default().to_string();
        let ours = name(rt.device_key());
        set.unknown_solvers(rt, &probes()).into_iter().filter(|(m, _)| name(&m.device) == ours).collect()
    }

    #[test]
    fn the_built_in_cpu_models_know_every_cpu_solver() {
        let rt = gconv_cpu::CpuRuntime::detect();
        let sets = ModelSet::embedded().unwrap();
        let cpu: Vec<&ModelSet> =
            sets.iter().filter(|s| s.models.iter().all(|m| rt.owns_device_key(&m.device))).collect();
        assert!(!cpu.is_empty(), "a built-in CPU model set");
        for set in &cpu {
            assert!(set.unknown_solvers(&rt, &probes()).is_empty(), "{}", set.origin);
        }
        let mut partial = cpu[0].clone();
        partial.models[0].spec.solvers.retain(|s| s != "cpu.depthwise");
        partial.models.iter_mut().for_each(|m| m.device = rt.device_key().to_string());
        let unknown: Vec<(String, Vec<&str>)> =
            own_models_unknown(&partial, &rt).into_iter().map(|(m, ids)| (m.file_name(), ids)).collect();
        assert_eq!(unknown, vec![(partial.models[0].file_name(), vec!["cpu.depthwise"])]);
    }

    /// The models built in for this GPU (where there are some; another GPU of its architecture
    /// lends the rest) know every registered solver that applies to their problems.
    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn gpu_the_built_in_models_of_this_gpu_know_every_solver() {
        let rt = gconv_cuda::CudaRuntime::probe(None).expect("a usable GPU");
        let set = ModelSet::for_device(ModelSet::embedded().unwrap(), rt.device_key()).expect("models of this kind");
        let unknown: Vec<(String, Vec<&str>)> =
            own_models_unknown(&set, &rt).into_iter().map(|(m, ids)| (m.file_name(), ids)).collect();
        assert!(unknown.is_empty(), "{}: {unknown:?}", set.origin);
    }
}
