//! `cpu.reference`: the oracle run as a solver, so it can be picked, timed and compared.

use gconv_core::reference::reference;
use gconv_core::{Config, ConvProblem, Invoker, NotApplicable, Result, Solve, Solver, SolverKind};

use crate::{Host, HostBuffers};

pub struct Reference;

impl Solver for Reference {
    fn id(&self) -> &'static str {
        "cpu.reference"
    }

    fn applicable(&self, _p: &ConvProblem) -> Result<(), NotApplicable> {
        Ok(())
    }

    fn kind(&self) -> SolverKind {
        SolverKind::Oracle
    }
}

impl Solve<Host> for Reference {
    fn solution(&self, p: &ConvProblem, _config: &Config) -> Result<Box<dyn Invoker<Host>>> {
        Ok(Box::new(ReferenceInvoker { problem: p.clone() }))
    }
}

struct ReferenceInvoker {
    problem: ConvProblem,
}

impl Invoker<Host> for ReferenceInvoker {
    fn run(&self, b: &mut HostBuffers<'_>) -> Result<()> {
        b.tensors.check(&self.problem)?;
        let exact = reference(&self.problem, b.tensors);
        let rounded: Vec<f32> = exact.iter().map(|&v| v as f32).collect();
        b.tensors.output_mut(self.problem.direction).store_f32(&rounded);
        Ok(())
    }
}
