//! `gconv explain`: every registered solver, whether it can run the problem and why not.

use gconv_core::{ConvProblem, Registry};
use gconv_cpu::Host;

pub fn explain(registry: &Registry<Host>, problems: &[ConvProblem]) {
    for p in problems {
        println!("problem:   {}", p.summary());
        println!("key:       {}", p.key());
        println!("{:<22} {:<11} {:>14} {:>8}  note", "solver", "applicable", "workspace B", "configs");
        for solver in registry.iter() {
            match solver.applicable(p) {
                Ok(()) => {
                    let config = solver.default_config(p);
                    println!(
                        "{:<22} {:<11} {:>14} {:>8}  default config {}",
                        solver.id(),
                        "yes",
                        solver.workspace_bytes(p, &config),
                        solver.configs(p).count(),
                        config
                    );
                }
                Err(reason) => println!("{:<22} {:<11} {:>14} {:>8}  {reason}", solver.id(), "no", "-", "-"),
            }
        }
        println!();
    }
}
