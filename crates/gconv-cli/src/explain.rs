//! `gconv explain`: every registered solver, whether it can run the problem and why not.

use gconv_core::{Backend, ConvProblem, Registry};

pub fn explain<B: Backend>(registry: &Registry<B>, p: &ConvProblem) {
    println!("problem:   {}", p.summary());
    println!("key:       {}", p.key());
    println!("{:<22} {:<11} {:>14} {:>8}  note", "solver", "applicable", "workspace B", "configs");
    for solver in registry.iter() {
        match solver.applicable(p) {
            Ok(()) => {
                let config = solver.default_config(p);
                let role = if solver.is_oracle() { "; the oracle, never picked by find" } else { "" };
                println!(
                    "{:<22} {:<11} {:>14} {:>8}  default config {config}{role}",
                    solver.id(),
                    "yes",
                    solver.workspace_bytes(p, &config),
                    solver.configs(p).count(),
                );
            }
            Err(reason) => println!("{:<22} {:<11} {:>14} {:>8}  {reason}", solver.id(), "no", "-", "-"),
        }
    }
    println!();
}
