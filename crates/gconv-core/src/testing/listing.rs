//! A device that lists and runs nothing: for tests of what listing candidates and ranking them
//! do with a set of solvers, where building or uploading would be a test's mistake.

use crate::{
    Config, ConvProblem, ConvTensors, DeviceFacts, GconvError, Result, Runtime, Solution, Solver, Workload, Yardstick,
};

/// `solvers` on a device of 8 units at 1 GHz, whose vendor yardstick for every problem is
/// `yardstick`.
pub struct ListingDevice<'a> {
    pub solvers: Vec<&'a dyn Solver>,
    pub yardstick: Option<Yardstick>,
}

impl Runtime for ListingDevice<'_> {
    fn backend(&self) -> &'static str {
        "listing"
    }

    fn device_key(&self) -> &str {
        "listing:0"
    }

    fn describe(&self) -> String {
        "a device that only lists its solvers' configs".into()
    }

    fn facts(&self) -> DeviceFacts {
        DeviceFacts { units: 8, clock_mhz: 1000 }
    }

    fn owns_device_key(&self, key: &str) -> bool {
        key == "listing:0"
    }

    fn solvers(&self) -> Vec<&dyn Solver> {
        self.solvers.clone()
    }

    fn build(&self, _id: &str, _p: &ConvProblem, _config: Config) -> Result<Solution> {
        Err(GconvError::Backend("nothing runs on a listing device".into()))
    }

    fn upload(&self, _p: &ConvProblem, _tensors: &ConvTensors) -> Result<Box<dyn Workload>> {
        Err(GconvError::Backend("nothing runs on a listing device".into()))
    }

    fn yardstick(&self, _p: &ConvProblem) -> Result<Option<Yardstick>> {
        Ok(self.yardstick.clone())
    }
}
