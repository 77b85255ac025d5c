//! `gconv explain`: every registered solver, whose code it runs, whether it can run the
//! problem and why not.

use gconv_core::{ConvProblem, Runtime};

pub fn explain(rt: &dyn Runtime, p: &ConvProblem, every_config: bool) {
    println!("problem:   {}", p.summary());
    println!("key:       {}", p.key());
    println!("{:<22} {:<15} {:<11} {:>14} {:>8}  note", "solver", "code", "applicable", "workspace B", "configs");
    for solver in rt.solvers() {
        let kind = solver.kind().label();
        match solver.applicable(p) {
            Ok(()) => {
                let config = solver.default_config(p);
                let role = match () {
                    _ if solver.is_oracle() => "; the oracle, never picked by find",
                    _ if solver.find_times_every_config() => "; find times every config",
                    _ => "",
                };
                println!(
                    "{:<22} {:<15} {:<11} {:>14} {:>8}  default config {config}{role}",
                    solver.id(),
                    kind,
                    "yes",
                    solver.workspace_bytes(p, &config),
                    solver.configs(p).count(),
                );
            }
            Err(reason) => println!("{:<22} {:<15} {:<11} {:>14} {:>8}  {reason}", solver.id(), kind, "no", "-", "-"),
        }
    }
    if every_config {
        for solver in rt.solvers().into_iter().filter(|s| s.applicable(p).is_ok()) {
            if let Some(listing) = solver.describe_listing(p) {
                println!("  {:<20} {listing}", solver.id());
            }
            for config in solver.configs(p) {
                let note = solver.describe_config(p, &config).unwrap_or_default();
                println!(
                    "  {:<20} {:<40} {:>14}  {note}",
                    solver.id(),
                    config.to_string(),
                    solver.workspace_bytes(p, &config)
                );
            }
        }
    }
    println!();
}
