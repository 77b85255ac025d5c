//! Every CUDA solver against the CPU reference on random small problems. Needs a GPU, so the
//! tests are ignored in CI; run them on the GPU machine (`.device/run-tests gpu`).

use gconv_core::reference::reference;
use gconv_core::testing::small_problem;
use gconv_core::verify::verify;
use gconv_core::{ConvProblem, ConvTensors, Direction, Solution};
use gconv_cuda::{registry, CudaDevice, DeviceTensors};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

fn check_all_solvers(device: &std::sync::Arc<CudaDevice>, p: &ConvProblem) -> Result<(), TestCaseError> {
    let reg = registry(device);
    let inputs = ConvTensors::random(p, 11);
    let exact = reference(p, &inputs);
    // Per solver, the default and three configs spread over the space: the same few per
    // solver and direction across cases, so their kernels build once.
    let mut runs = Vec::new();
    for solver in reg.applicable(p) {
        let space: Vec<_> = solver.configs(p).collect();
        let spread = [1, 3, 5].into_iter().filter_map(|i| space.get(space.len() * i / 7).cloned());
        runs.extend(std::iter::once(solver.default_config(p)).chain(spread).map(|config| (solver, config)));
    }
    // Build them all in parallel first; a failed build shows again when the run builds it.
    std::thread::scope(|scope| {
        for (solver, config) in &runs {
            scope.spawn(move || solver.prepare(p, config));
        }
    });
    for (solver, config) in runs {
        let fail = |e: gconv_core::GconvError| TestCaseError::fail(format!("{} {config} on {}: {e}", solver.id(), p.key()));
        let solution = Solution::build(solver, p, config.clone()).map_err(fail)?;
        let mut gpu = DeviceTensors::upload(device, &inputs).map_err(fail)?;
        gpu.reserve_workspace(device, solution.workspace_bytes).map_err(fail)?;
        solution.invoker.run(&mut gpu.buffers(device).map_err(fail)?).map_err(fail)?;
        let mut out = inputs.output(p.direction).clone();
        gpu.download_output(device, p, &mut out).map_err(fail)?;
        let v = verify(p, &out, &exact);
        prop_assert!(
            v.passed,
            "{} {config} on {}: error {:e} > tolerance {:e} at element {}",
            solver.id(),
            p.key(),
            v.max_error,
            v.tolerance,
            v.worst_index
        );
    }
    Ok(())
}

/// 100 random problems of one direction; one test per direction, so that they build their
/// kernels in parallel test threads.
fn every_solver_matches_the_reference(direction: Direction) {
    let device = CudaDevice::probe(None).expect("a usable CUDA GPU");
    let mut runner = TestRunner::new(ProptestConfig { cases: 100, ..ProptestConfig::default() });
    let problems = small_problem().prop_map(move |p| ConvProblem { direction, ..p });
    runner.run(&problems, |p| check_all_solvers(&device, &p)).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_forward_solvers_match_the_reference() {
    every_solver_matches_the_reference(Direction::Forward);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_backward_data_solvers_match_the_reference() {
    every_solver_matches_the_reference(Direction::BackwardData);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_backward_weight_solvers_match_the_reference() {
    every_solver_matches_the_reference(Direction::BackwardWeight);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_kernels_build_once_and_load_from_the_disk_cache() {
    let dir = std::env::temp_dir().join(format!("gconv-kernel-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let p = ConvProblem::from_key("v1:fwd:bf16:NHWC:n2:c8:k8:i9x9:f3x3:s1x1:p1x1:d1x1:g2").unwrap();
    let cold = CudaDevice::probe(Some(dir.clone())).unwrap();
    let reg = registry(&cold);
    let solver = reg.get("cuda.naive").unwrap();
    assert!(solver.needs_build(&p, &solver.default_config(&p)));
    Solution::build(solver, &p, solver.default_config(&p)).unwrap();
    Solution::build(solver, &p, solver.default_config(&p)).unwrap();
    let stats = cold.build_stats();
    assert_eq!((stats.builds, stats.memory_hits), (1, 1), "{stats:?}");
    assert!(!solver.needs_build(&p, &solver.default_config(&p)));

    // A fresh process-like device finds the CUBIN on disk; a corrupt entry is rebuilt.
    let warm = CudaDevice::probe(Some(dir.clone())).unwrap();
    Solution::build(registry(&warm).get("cuda.naive").unwrap(), &p, Default::default()).unwrap();
    assert_eq!(warm.build_stats().disk_hits, 1, "{:?}", warm.build_stats());
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::write(entry.unwrap().path(), b"\x7fELF but not really a cubin").unwrap();
    }
    let corrupt = CudaDevice::probe(Some(dir.clone())).unwrap();
    Solution::build(registry(&corrupt).get("cuda.naive").unwrap(), &p, Default::default()).unwrap();
    assert_eq!(corrupt.build_stats().builds, 1, "{:?}", corrupt.build_stats());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn probe_never_panics_and_says_why() {
    match CudaDevice::probe(None) {
        Ok(device) => assert!(device.key().starts_with("cuda:"), "{}", device.key()),
        Err(reason) => assert!(!reason.is_empty()),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_every_registered_solver_is_reached() {
    let device = CudaDevice::probe(None).expect("a usable CUDA GPU");
    let keys = [
        "v1:bwd-weight:bf16:NHWC:n3:c8:k12:i5x7:f1x1:s1x1:p0x0:d1x1:g2",
        "v1:fwd:f32:NCHW:n2:c6:k4:i5x5:f1x1:s1x1:p0x0:d1x1",
        "v1:bwd-data:f16:NCHW:n2:c6:k6:i9x9:f3x3:s2x2:p1x1:d1x1:g6",
        "v1:bwd-weight:bf16:NHWC:n2:c16:k16:i11x9:f5x5:s1x2:p2x2:d1x1:g16",
        "v1:fwd:f16:NDHWC:n1:c8:k8:i4x6x6:f3x3x3:s1x1x1:p1x1x1:d1x1x1:g8",
        "v1:bwd-data:f32:NHWC:n2:c12:k8:i7x7:f3x3:s2x2:p1x1:d1x1:g2",
        "v1:fwd:bf16:NHWC:n2:c16:k32:i9x9:f3x3:s2x2:p1x1:d1x1:g4",
    ];
    let reg = registry(&device);
    let mut reached = std::collections::HashSet::new();
    for key in keys {
        let p = ConvProblem::from_key(key).unwrap();
        check_all_solvers(&device, &p).unwrap();
        reached.extend(reg.applicable(&p).map(|s| s.id()));
    }
    for solver in reg.iter() {
        assert!(reached.contains(solver.id()), "{} never ran", solver.id());
    }
}

/// Problems with many reduction tiles, several row and column tiles and real split-K, which
/// the small random problems rarely reach.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_implicit_gemm_on_medium_problems() {
    let device = CudaDevice::probe(None).expect("a usable CUDA GPU");
    let shapes = [
        "n2:c64:k96:i20x20:f3x3:s1x1:p1x1:d1x1",
        "n3:c48:k64:i17x15:f3x3:s2x2:p1x1:d1x1",
        "n2:c64:k64:i14x14:f3x3:s1x1:p1x1:d1x1:g4",
        "n2:c32:k32:i15x15:f3x3:s1x1:p1x1:d1x1:g8",
        "n3:c64:k64:i14x14:f3x3:s2x2:p1x1:d1x1:g8",
        "n2:c24:k40:i9x11:f1x1:s2x2:p0x0:d1x1",
        "n2:c3:k32:i23x23:f7x7:s2x2:p3x3:d1x1",
        "n2:c16:k16:i6x8x8:f3x3x3:s1x2x2:p1x1x1:d1x1x1",
        "n1:c40:k24:i15x15:f3x3:s3x3:p2x2:d2x2",
    ];
    for shape in shapes {
        for direction in ["fwd", "bwd-data", "bwd-weight"] {
            for dtype in ["bf16", "f16", "f32", "tf32"] {
                let layout = if shape.matches('x').count() > 6 { "NDHWC" } else { "NHWC" };
                let p = ConvProblem::from_key(&format!("v1:{direction}:{dtype}:{layout}:{shape}")).unwrap();
                check_all_solvers(&device, &p).unwrap();
            }
        }
    }
}
