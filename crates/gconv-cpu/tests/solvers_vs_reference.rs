//! Every CPU solver, with its default config and a sample of its tunable configs, against the
//! reference on random small problems of every rank, group shape, direction, dtype and layout:
//! the every-solver body of gconv-core's testing module, run on the CPU runtime.

use gconv_core::testing::{check_conversions, check_every_solver, check_every_solver_is_reached, small_problem};
use gconv_core::{ConvProblem, Runtime};
use gconv_cpu::{CpuDevice, CpuRuntime};
use proptest::prelude::*;

fn runtime() -> CpuRuntime {
    CpuRuntime::new(CpuDevice { threads: 2, model: "test".into(), simd: "any" })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn every_solver_matches_the_reference(p in small_problem()) {
        check_every_solver(&runtime(), &p, 4).map_err(TestCaseError::fail)?;
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
    check_every_solver_is_reached(&runtime(), &keys, usize::MAX).unwrap();
}

#[test]
fn tunable_configs_are_valid_and_round_trip() {
    let rt = runtime();
    let solver = rt.solver("cpu.direct_blocked").unwrap();
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
    let reference = rt.solver("cpu.reference").unwrap();
    let p = ConvProblem::from_key("v1:fwd:f32:NCHW:n1:c4:k4:i9x9:f3x3:s1x1:p1x1:d1x1").unwrap();
    assert!(reference.check_config(&p, &"rb1".parse().unwrap()).is_err());
}

#[test]
fn conversions_between_layer_formats_match_the_host_reference() {
    check_conversions(&runtime()).unwrap();
}
