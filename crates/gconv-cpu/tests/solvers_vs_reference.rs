//! Every CPU solver, with its default config and a sample of its tunable configs, against the
//! reference on random small problems of every rank, group shape, direction, dtype and layout.

use gconv_core::reference::reference;
use gconv_core::testing::small_problem;
use gconv_core::verify::verify;
use gconv_core::{ConvProblem, ConvTensors, Solution};
use gconv_cpu::{registry, CpuDevice, HostBuffers};
use proptest::prelude::*;

fn device() -> CpuDevice {
    CpuDevice { threads: 2, model: "test".into(), simd: "any" }
}

fn check_all_solvers(p: &ConvProblem, config_sample: usize) -> Result<(), TestCaseError> {
    let reg = registry(&device());
    let inputs = ConvTensors::random(p, 7);
    let exact = reference(p, &inputs);
    for solver in reg.applicable(p) {
        let configs = std::iter::once(solver.default_config(p)).chain(solver.configs(p).step_by(3).take(config_sample));
        for config in configs {
            let solution = Solution::build(solver, p, config.clone())
                .map_err(|e| TestCaseError::fail(format!("{}: {e}", solver.id())))?;
            let mut tensors = inputs.clone();
            let mut workspace = vec![f32::NAN; solution.workspace_bytes.div_ceil(4) as usize];
            solution
                .invoker
                .run(&mut HostBuffers { tensors: &mut tensors, workspace: &mut workspace })
                .map_err(|e| TestCaseError::fail(format!("{}: {e}", solver.id())))?;
            let v = verify(p, tensors.output(p.direction), &exact);
            prop_assert!(
                v.passed,
                "{} {} on {}: error {:e} > tolerance {:e} at element {}",
                solver.id(),
                config,
                p.key(),
                v.max_error,
                v.tolerance,
                v.worst_index
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn every_solver_matches_the_reference(p in small_problem()) {
        check_all_solvers(&p, 4)?;
    }
}

#[test]
fn every_registered_solver_is_reached() {
    // A fixed mix that makes each solver applicable at least once.
    let keys = [
        "v1:fwd:f32:NHWC:n2:c8:k8:i6x6:f1x1:s1x1:p0x0:d1x1",
        "v1:bwd-weight:bf16:NCHW:n2:c6:k6:i7x7:f3x3:s2x2:p1x1:d1x1:g6",
        "v1:bwd-data:f16:NDHWC:n1:c4:k6:i4x5x3:f2x3x1:s2x1x1:p1x0x1:d1x2x1:g2",
    ];
    let reg = registry(&device());
    let mut reached = std::collections::HashSet::new();
    for key in keys {
        let p = ConvProblem::from_key(key).unwrap();
        check_all_solvers(&p, usize::MAX).unwrap();
        reached.extend(reg.applicable(&p).map(|s| s.id()));
    }
    for solver in reg.iter() {
        assert!(reached.contains(solver.id()), "{} never ran", solver.id());
    }
}

#[test]
fn tunable_configs_are_valid_and_round_trip() {
    let reg = registry(&device());
    let solver = reg.get("cpu.direct_blocked").unwrap();
    for key in [
        "v1:fwd:f32:NCHW:n1:c40:k300:i9x9:f3x3:s1x1:p1x1:d1x1",
        "v1:bwd-weight:f32:NHWC:n1:c40:k300:i9x9:f3x3:s1x1:p1x1:d1x1",
    ] {
        let p = ConvProblem::from_key(key).unwrap();
        let configs: Vec<_> = solver.configs(&p).collect();
        assert!(configs.len() > 10, "{key}: only {} configs", configs.len());
        for config in configs {
            solver.check_config(&p, &config).unwrap();
            assert_eq!(config.to_string().parse::<gconv_core::Config>().unwrap(), config);
        }
        assert!(solver.check_config(&p, &"rb0_kb8_lo1".parse().unwrap()).is_err());
        assert!(solver.check_config(&p, &"kb9999_cb8".parse().unwrap()).is_err());
    }
    assert!(reg.get("cpu.reference").unwrap().check_config(&ConvProblem::from_key(
        "v1:fwd:f32:NCHW:n1:c4:k4:i9x9:f3x3:s1x1:p1x1:d1x1").unwrap(), &"rb1".parse().unwrap()).is_err());
}
