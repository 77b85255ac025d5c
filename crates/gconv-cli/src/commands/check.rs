//! `gconv check`: every solver of the backend against the reference on random problems drawn
//! from seeds, the GPU tests' random-problem check run at as many seeds as wanted (a stress
//! run), or on given problems. A failure prints its seed and the failing problem's key, which
//! `--key` replays alone; work that does not return is named by a watchdog that ends the run.

use std::process::ExitCode;

use clap::Args;
use gconv_core::testing::{check_every_solver, check_random_problems};
use gconv_core::{ConvProblem, Direction, Runtime};

#[derive(Debug, Args)]
pub struct CheckCmd {
    /// The first seed problems are drawn from
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many seeds, from --seed on
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// Random problems per seed
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    cases: u32,
    /// Only problems of this direction; default: any
    #[arg(long, value_parser = ["fwd", "bwd-data", "bwd-weight"])]
    direction: Option<String>,
    /// Configs per solver beside its default, spread over its space
    #[arg(long, default_value_t = 3)]
    sample: usize,
    /// Check these problems (keys) instead of random ones (repeatable)
    #[arg(long = "key", value_name = "KEY")]
    keys: Vec<String>,
}

pub fn check(rt: &dyn Runtime, device_line: &str, cmd: &CheckCmd) -> anyhow::Result<ExitCode> {
    let direction = cmd.direction.as_deref().and_then(|d| Direction::ALL.into_iter().find(|known| known.token() == d));
    println!("device:    {device_line}");
    let mut failures = 0;
    if !cmd.keys.is_empty() {
        for key in &cmd.keys {
            let p = ConvProblem::from_key(key).map_err(|e| anyhow::anyhow!("--key {key}: {e}"))?;
            match check_every_solver(rt, &p, cmd.sample) {
                Ok(()) => println!("{key}: every solver matches the reference"),
                Err(e) => {
                    failures += 1;
                    println!("{key}: {e}");
                }
            }
        }
    } else {
        let which = direction.map_or("any direction", Direction::token);
        for seed in cmd.seed..cmd.seed.saturating_add(cmd.seeds) {
            match check_random_problems(rt, direction, seed, cmd.cases, cmd.sample) {
                Ok(()) => println!("seed {seed}: {} random problems ({which}) match the reference", cmd.cases),
                Err(failure) => {
                    failures += 1;
                    println!("{failure}");
                }
            }
        }
    }
    Ok(if failures == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
