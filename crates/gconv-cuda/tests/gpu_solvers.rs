//! Every CUDA solver against the CPU reference, through the CUDA runtime and the every-solver
//! body of gconv-core's testing module, plus the build cache, the timing path, and runtimes
//! and threads sharing the GPU. Needs a GPU, so the tests are ignored in CI; run them on a GPU
//! machine (`cargo test --workspace -- --include-ignored`, or `.device/run-tests gpu`). The
//! tests share one runtime and run at once, as threads of an application would; a hang is
//! named by the watchdog and ends the process.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use gconv_core::testing::{
    channels_first_variants, channels_last_variants, check_conversions, check_every_solver,
    check_every_solver_is_reached, check_random_problems, check_solvers, watch_for, RUN_LIMIT,
};
use gconv_core::{Config, ConvProblem, ConvTensors, Direction, Runtime, Solver, TimingMethod, TimingOptions};
use gconv_cuda::CudaRuntime;
use support::{
    list_misses, list_misses_of, persist_regression, prebuild_checks, quiet_gpu, regressions, runtime, sample_configs,
    shared_gpu, Stopwatch, SEED,
};

/// Random problems per direction and run, drawn from [`SEED`]; proptest's PROPTEST_CASES sets
/// fewer (a run under compute-sanitizer) or more.
const RANDOM_CASES: u32 = 100;
/// Configs of a large space run on each medium problem beside its default and those that bring
/// a config value not yet run (`support::sample_configs`).
const SAMPLED_EXTRA: usize = 3;

/// The problems of the regressions file, then random ones from the run's seed; one test per
/// direction, so that a failure names it. A failing random problem is printed with its seed and
/// added to the regressions file.
fn every_solver_matches_the_reference(direction: Direction) {
    let _gpu = shared_gpu();
    let rt = runtime();
    for p in regressions(direction) {
        check_every_solver(rt, &p, 3).unwrap_or_else(|e| panic!("regression {}: {e}", p.key()));
    }
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(RANDOM_CASES);
    if let Err(failure) = check_random_problems(rt, Some(direction), SEED, cases, 3) {
        let persisted = failure.key.as_deref().map(persist_regression).unwrap_or_default();
        panic!("{failure}\n{persisted}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_forward_solvers_match_the_reference() {
    let _time = Stopwatch::start("forward random");
    every_solver_matches_the_reference(Direction::Forward);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_backward_data_solvers_match_the_reference() {
    let _time = Stopwatch::start("backward-data random");
    every_solver_matches_the_reference(Direction::BackwardData);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_backward_weight_solvers_match_the_reference() {
    let _time = Stopwatch::start("backward-weight random");
    every_solver_matches_the_reference(Direction::BackwardWeight);
}

/// Every cuDNN engine config of every direction, dtype and layout, 2D and 3D, dense, grouped
/// and depthwise: one at least matches the reference, and the runtime's verification (which
/// find runs) agrees with the reference on each, so no wrong config can be picked. (cuDNN
/// offers inexact engines without saying so: eng17 on an exact-fp32 depthwise backward-weight
/// is off by 1e-3.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_cudnn_matches_the_reference_in_every_direction_dtype_and_layout() {
    let (_time, _gpu, rt) = (Stopwatch::start("cudnn"), shared_gpu(), runtime());
    let shapes = [
        ("n2:c8:k12:i9x9:f3x3:s1x1:p1x1:d1x1", "dense 2D"),
        ("n2:c16:k16:i9x7:f3x3:s2x2:p1x1:d1x1:g4", "grouped 2D"),
        ("n2:c16:k16:i10x10:f5x5:s1x1:p2x2:d1x1:g16", "depthwise 2D"),
        ("n1:c8:k8:i5x6x6:f3x3x3:s1x1x1:p1x1x1:d1x1x1:g2", "grouped 3D"),
        ("n1:c8:k8:i5x6x6:f3x3x3:s1x2x2:p1x1x1:d1x1x1:g8", "depthwise 3D"),
    ];
    for (shape, what) in shapes {
        let three_d = shape.matches('x').count() > 6;
        for layout in if three_d { ["NCDHW", "NDHWC"] } else { ["NCHW", "NHWC"] } {
            for direction in ["fwd", "bwd-data", "bwd-weight"] {
                for dtype in ["f32", "tf32", "f16", "bf16"] {
                    let p = ConvProblem::from_key(&format!("v1:{direction}:{dtype}:{layout}:{shape}")).unwrap();
                    rt.solver("cuda.cudnn")
                        .unwrap()
                        .applicable(&p)
                        .unwrap_or_else(|r| panic!("{what}: cuda.cudnn cannot run {}: {r}", p.key()));
                    check_solvers(rt, &p, 8, |s| s.id() == "cuda.cudnn").unwrap_or_else(|e| panic!("{what}: {e}"));
                }
            }
        }
    }
}

/// The models built in for this GPU (where there are some; another GPU of its architecture
/// lends the rest) know every registered solver that applies to their problems.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_the_built_in_models_of_this_gpu_know_every_solver() {
    use gconv_heuristic::model::ModelSet;
    let rt = runtime();
    let set = ModelSet::for_device(ModelSet::embedded().unwrap(), rt.device_key()).expect("models of this kind");
    let unknown: Vec<(String, Vec<&str>)> =
        set.own_models_unknown(rt).into_iter().map(|(m, ids)| (m.file_name(), ids)).collect();
    assert!(unknown.is_empty(), "{}: {unknown:?}", set.origin);
}

/// A problem's cuDNN listing is made once per build cache: a later runtime (a later process)
/// reads it from disk, the same configs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_cudnn_listings_are_read_back_from_the_build_cache() {
    let _gpu = shared_gpu();
    let dir = std::env::temp_dir().join(format!("gconv-test-listings-{}", std::process::id()));
    let p = ConvProblem::from_key("v1:fwd:bf16:NHWC:n8:c64:k96:i28x28:f3x3:s1x1:p1x1:d1x1").unwrap();
    let listing = |rt: &CudaRuntime| {
        let cudnn = rt.solver("cuda.cudnn").unwrap();
        let configs: Vec<String> = cudnn.configs(&p).map(|c| c.to_string()).collect();
        (configs, cudnn.describe_listing(&p).unwrap_or_default())
    };
    let (listed, first) = listing(&CudaRuntime::probe(Some(dir.clone())).expect("a usable CUDA GPU"));
    assert!(!listed.is_empty() && first.starts_with("listed in"), "{first}");
    let (read, later) = listing(&CudaRuntime::probe(Some(dir.clone())).expect("a usable CUDA GPU"));
    assert_eq!(read, listed);
    assert!(later.contains("disk cache"), "{later}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The model's pick lists cuDNN's configs quickly (heuristics A and FALLBACK, then only the
/// default-knob engines it asks about): the configs it gets are the full listing's less those
/// only heuristic B names, cuDNN's own marks are the full listing's, and a full listing
/// asked later in the process replaces it, in the disk cache too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_cudnn_quick_listings_name_what_the_full_one_does_but_heuristic_b() {
    let _gpu = shared_gpu();
    let root = std::env::temp_dir().join(format!("gconv-test-quick-listings-{}", std::process::id()));
    let fresh = |name: &str| CudaRuntime::probe(Some(root.join(name))).expect("a usable CUDA GPU");
    for key in [
        "v1:fwd:bf16:NHWC:n8:c64:k96:i28x28:f3x3:s1x1:p1x1:d1x1",
        "v1:bwd-data:f32:NCHW:n4:c32:k48:i17x17:f3x3:s1x1:p1x1:d1x1",
        "v1:bwd-weight:f16:NHWC:n8:c64:k64:i14x14:f1x1:s1x1:p0x0:d1x1:g4",
    ] {
        let p = ConvProblem::from_key(key).unwrap();
        let (full_rt, quick_rt) = (fresh(&format!("full-{}", p.direction)), fresh(&format!("quick-{}", p.direction)));
        let (full, quick) = (full_rt.solver("cuda.cudnn").unwrap(), quick_rt.solver("cuda.cudnn").unwrap());
        let listed: Vec<Config> = full.configs(&p).collect();
        let only_b = |c: &Config| full.describe_config(&p, c).unwrap_or_default().starts_with("heuristic B;");
        let wanted: HashSet<Config> = listed.iter().cloned().collect();
        let expected: Vec<Config> = listed.iter().filter(|c| !only_b(c)).cloned().collect();
        let mut got = quick.configs_among(&p, &wanted);
        let mut expected_sorted = expected.clone();
        got.sort_by_key(|c| c.to_string());
        expected_sorted.sort_by_key(|c| c.to_string());
        assert_eq!(got, expected_sorted, "{key}");
        let described = quick.describe_listing(&p).unwrap_or_default();
        assert!(described.starts_with("quick listing in"), "{key}: {described}");
        let marks = |rt: &CudaRuntime| rt.yardstick(&p).unwrap().map(|y| (y.heuristic, y.find));
        assert_eq!(marks(&quick_rt), marks(&full_rt), "{key}: cuDNN's own pick and find list");
        // Find's full listing replaces the quick one, for a later process too.
        assert_eq!(quick.configs(&p).collect::<Vec<_>>(), listed, "{key}");
        let later = fresh(&format!("quick-{}", p.direction));
        let read = later.solver("cuda.cudnn").unwrap();
        assert_eq!(read.configs(&p).collect::<Vec<_>>(), listed, "{key}");
        assert!(read.describe_listing(&p).is_some_and(|d| d.contains("disk cache")), "{key}: read, not listed again");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_kernels_build_once_and_load_from_the_disk_cache() {
    // Runtimes of its own, beside the other tests' shared one.
    let (_time, _gpu) = (Stopwatch::start("kernel cache"), shared_gpu());
    let dir = std::env::temp_dir().join(format!("gconv-kernel-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let p = ConvProblem::from_key("v1:fwd:bf16:NHWC:n2:c8:k8:i9x9:f3x3:s1x1:p1x1:d1x1:g2").unwrap();
    let cold = CudaRuntime::probe(Some(dir.clone())).unwrap();
    let solver = cold.solver("cuda.naive").unwrap();
    assert!(solver.needs_build(&p, &solver.default_config(&p)));
    cold.build("cuda.naive", &p, Default::default()).unwrap();
    cold.build("cuda.naive", &p, Default::default()).unwrap();
    let stats = cold.device.build_stats();
    assert_eq!((stats.builds, stats.memory_hits), (1, 1), "{stats:?}");
    assert!(!solver.needs_build(&p, &solver.default_config(&p)));

    // Threads preparing problems that share a source build it once between them.
    let shared: Vec<ConvProblem> = (1..=8)
        .map(|n| ConvProblem::from_key(&format!("v1:fwd:f16:NHWC:n{n}:c8:k8:i9x9:f3x3:s1x1:p1x1:d1x1")).unwrap())
        .collect();
    let before = cold.device.build_stats().builds;
    std::thread::scope(|scope| {
        for q in &shared {
            scope.spawn(|| solver.prepare(q, &solver.default_config(q)).unwrap());
        }
    });
    assert_eq!(cold.device.build_stats().builds, before + 1, "{:?}", cold.device.build_stats());
    assert!(shared.iter().all(|q| !solver.needs_build(q, &solver.default_config(q))));

    // A solution that launches helper kernels too (on sm_90 a packed stem: the products and
    // pack_taps) is wholly built by prepare: building the solution then compiles nothing.
    let stem = ConvProblem::from_key("v1:fwd:bf16:NHWC:n1:c3:k16:i16x16:f7x7:s2x2:p3x3:d1x1").unwrap();
    let wgmma = cold.solver("cuda.igemm_wgmma").unwrap();
    if wgmma.applicable(&stem).is_ok() {
        let config = wgmma.default_config(&stem);
        wgmma.prepare(&stem, &config).unwrap();
        assert!(!wgmma.needs_build(&stem, &config));
        let built = cold.device.build_stats().builds;
        cold.build("cuda.igemm_wgmma", &stem, config).unwrap();
        assert_eq!(cold.device.build_stats().builds, built, "{:?}", cold.device.build_stats());
    }

    // A fresh process-like runtime finds the CUBIN on disk; a corrupt entry is rebuilt.
    let warm = CudaRuntime::probe(Some(dir.clone())).unwrap();
    warm.build("cuda.naive", &p, Default::default()).unwrap();
    assert_eq!(warm.device.build_stats().disk_hits, 1, "{:?}", warm.device.build_stats());
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::write(entry.unwrap().path(), b"\x7fELF but not really a cubin").unwrap();
    }
    let corrupt = CudaRuntime::probe(Some(dir.clone())).unwrap();
    corrupt.build("cuda.naive", &p, Default::default()).unwrap();
    assert_eq!(corrupt.device.build_stats().builds, 1, "{:?}", corrupt.device.build_stats());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_every_registered_solver_is_reached() {
    let keys = [
        "v1:bwd-weight:bf16:NHWC:n3:c8:k12:i5x7:f1x1:s1x1:p0x0:d1x1:g2",
        "v1:fwd:f32:NCHW:n2:c6:k4:i5x5:f1x1:s1x1:p0x0:d1x1",
        "v1:bwd-data:f16:NCHW:n2:c6:k6:i9x9:f3x3:s2x2:p1x1:d1x1:g6",
        "v1:bwd-weight:bf16:NHWC:n2:c16:k16:i11x9:f5x5:s1x2:p2x2:d1x1:g16",
        "v1:fwd:f16:NDHWC:n1:c8:k8:i4x6x6:f3x3x3:s1x1x1:p1x1x1:d1x1x1:g8",
        "v1:bwd-data:f32:NHWC:n2:c12:k8:i7x7:f3x3:s2x2:p1x1:d1x1:g2",
        "v1:fwd:bf16:NHWC:n2:c16:k32:i9x9:f3x3:s2x2:p1x1:d1x1:g4",
        "v1:fwd:bf16:NHWC:n2:c64:k64:i9x9:f3x3:s1x1:p1x1:d1x1",
        "v1:bwd-weight:f16:NHWC:n2:c32:k32:i9x7:f3x3:s1x1:p1x1:d1x1:g4",
        "v1:bwd-data:bf16:NHWC:n3:c16:k24:i5x7:f1x1:s1x1:p0x0:d1x1",
    ];
    let (_time, _gpu) = (Stopwatch::start("every solver reached"), shared_gpu());
    check_every_solver_is_reached(runtime(), &keys, 3).unwrap();
}

/// Every kind of solver (NVRTC kernels, cuBLAS, cuDNN) is timed by graph replay, with several
/// calls per sample for small problems and one for cold-cache samples, and the times are
/// plausible: above zero, and the per-call time of a replay of many calls is no more than one
/// lone call's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_every_solver_kind_is_timed_by_graph_replay() {
    // Alone on the GPU: other tests' kernels would slow one sample and not the other.
    let (_time, _gpu, rt) = (Stopwatch::start("graph timing"), quiet_gpu(), runtime());
    let cases = [
        ("cuda.igemm_tc", "v1:fwd:bf16:NHWC:n8:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1"),
        ("cuda.gemm_blas", "v1:fwd:f16:NHWC:n8:c64:k64:i28x28:f1x1:s1x1:p0x0:d1x1"),
        ("cuda.cudnn", "v1:bwd-weight:bf16:NHWC:n8:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1:g4"),
        ("cuda.depthwise", "v1:bwd-data:f32:NHWC:n8:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1:g64"),
    ];
    for (id, key) in cases {
        let p = ConvProblem::from_key(key).unwrap();
        let _watched = watch_for(RUN_LIMIT, format!("timing {id} on {key}"));
        let solution = rt.build(id, &p, rt.solver(id).unwrap().default_config(&p)).unwrap();
        let mut data = rt.upload(&p, &ConvTensors::random(&p, 3)).unwrap();
        data.run(&solution).unwrap();
        let mut warm = data.timer(&solution, TimingOptions::default()).unwrap();
        let per_call = warm.sample().unwrap();
        assert_eq!(warm.method(), TimingMethod::GraphReplay, "{id}");
        assert!(warm.calls() > 1, "{id}: a small problem takes several calls per sample");
        drop(warm);
        let mut cold = data.timer(&solution, TimingOptions { cold_cache: true }).unwrap();
        let lone = cold.sample().unwrap();
        assert_eq!((cold.method(), cold.calls()), (TimingMethod::GraphReplay, 1), "{id}");
        assert!(per_call > 0.0 && per_call < 0.01, "{id}: {per_call} s per call");
        assert!(per_call <= lone * 1.1, "{id}: {per_call} s per call warm, {lone} s cold");
    }
}

/// cuda.depthwise_tiled on problems larger than its tiles: several row, column and channel
/// blocks, channel counts that leave a block's lanes partly idle, strides, dilation, pads over
/// the filter's span, 5x5 and 7x7 filters and 3D, in every direction and data type it takes
/// (strided backward-data: strides 2 and 3, in depth too, and a 1x1 whose odd pixels no tap
/// reaches);
/// groups of 2 and 4 channels (forward and backward-data: a group across lanes in fp32 and
/// bf16 groups of 4); backward-weight with a warp per row of taps at every tile.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_depthwise_tiles_on_medium_problems() {
    let (_time, _gpu, rt) = (Stopwatch::start("depthwise_tiled medium"), shared_gpu(), runtime());
    let shapes = [
        "n2:c72:k72:i19x23:f3x3:s1x1:p1x1:d1x1:g72",
        "n2:c40:k40:i17x17:f5x5:s2x2:p2x2:d1x1:g40",
        "n1:c96:k96:i15x13:f7x7:s1x1:p3x3:d1x1:g96",
        "n3:c34:k34:i12x12:f3x3:s1x1:p2x2:d2x2:g34",
        "n2:c2:k2:i9x30:f3x5:s1x1:p0x3:d1x1:g2",
        "n1:c24:k24:i5x9x9:f3x3x3:s1x1x1:p1x1x1:d1x1x1:g24",
        "n2:c64:k64:i19x23:f3x3:s1x1:p1x1:d1x1:g16",
        "n2:c100:k100:i13x15:f3x3:s2x2:p1x1:d1x1:g25",
        "n1:c36:k36:i11x9:f3x3:s1x1:p2x2:d2x2:g18",
        "n1:c32:k32:i4x7x7:f3x3x3:s1x1x1:p1x1x1:d1x1x1:g8",
        "n2:c48:k48:i15x14:f3x3:s3x2:p1x2:d1x1:g48",
        "n1:c32:k32:i7x9x9:f3x3x3:s2x2x2:p1x1x1:d1x1x1:g32",
        "n2:c64:k64:i10x11:f1x1:s2x2:p0x0:d1x1:g64",
    ];
    let problems: Vec<ConvProblem> = shapes.into_iter().flat_map(channels_last_variants).collect();
    prebuild_checks(rt, &problems, 6, |s| s.id() == "cuda.depthwise_tiled");
    for p in &problems {
        check_solvers(rt, p, 6, |s| s.id() == "cuda.depthwise_tiled").unwrap();
    }
    // Backward-weight with a warp per row of taps or two staging buffers, and strided
    // backward-data (its phases fall differently on each tile's rows), at every tile.
    let strided_backward_data =
        |p: &ConvProblem| p.direction == Direction::BackwardData && p.dims.iter().any(|d| d.stride > 1);
    list_misses(rt, "cuda.depthwise_tiled", &shapes, |solver, p| {
        solver
            .configs(p)
            .filter(|c| c.get("tr") == Some(1) || c.get("db") == Some(1) || strided_backward_data(p))
            .collect()
    });
}

/// cuda.gemm_blas at every config where it has some: grouped channels-last 1x1 backward-weight
/// whose reduction over 12,261 and 10,201 pixel rows splits into chunks of 1,024 to 8,192 rows
/// (the last ragged), in both batchings (over a group's chunks, over a chunk's groups); and
/// channels-first 1x1 layers whose pixel rows (289, 61 x 67, 7 x 5 x 3, 37) are off 16 bytes,
/// from pitched copies: batched over images or over groups, backward-weight's images summed in
/// chunks or one image alone.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_gemm_blas_at_every_config() {
    let (_time, _gpu, rt) = (Stopwatch::start("gemm_blas configs"), shared_gpu(), runtime());
    let shapes = ["n3:c16:k32:i61x67:f1x1:s1x1:p0x0:d1x1:g4", "n1:c8:k8:i101x101:f1x1:s1x1:p0x0:d1x1:g2"];
    list_misses(rt, "cuda.gemm_blas", &shapes, |solver, p| solver.configs(p).collect());
    let misaligned: Vec<ConvProblem> = [
        "n4:c48:k40:i17x17:f1x1:s1x1:p0x0:d1x1",
        "n3:c16:k32:i61x67:f1x1:s1x1:p0x0:d1x1:g4",
        "n1:c24:k8:i7x5x3:f1x1x1:s1x1x1:p0x0x0:d1x1x1",
        "n2:c8:k16:i37:f1:s1:p0:d1:g2",
    ]
    .into_iter()
    .flat_map(channels_first_variants)
    .collect();
    list_misses_of(rt, "cuda.gemm_blas", &misaligned, |solver, p| solver.configs(p).collect());
}

/// cuda.pointwise at every config: 1x1 layers at stride 1 with a side of up to 32 channels,
/// forward and backward-data in bf16 and fp16, 1D to 3D; pixels past the last block and blocks
/// walking several tiles, reductions padded to 16 (24, 40, 56 channels) and of 256, one to 32
/// column tiles (in groups of 1 to 8).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_pointwise_on_medium_problems() {
    let (_time, _gpu, rt) = (Stopwatch::start("pointwise medium"), shared_gpu(), runtime());
    let shapes = [
        "n2:c32:k16:i19x23:f1x1:s1x1:p0x0:d1x1",
        "n3:c24:k144:i9x7:f1x1:s1x1:p0x0:d1x1",
        "n2:c40:k24:i11x13:f1x1:s1x1:p0x0:d1x1",
        "n1:c56:k32:i3x5x7:f1x1x1:s1x1x1:p0x0x0:d1x1x1",
        "n2:c8:k64:i37:f1:s1:p0:d1",
        "n2:c256:k8:i5x6:f1x1:s1x1:p0x0:d1x1",
        "n8:c16:k16:i128x160:f1x1:s1x1:p0x0:d1x1",
    ];
    list_misses(rt, "cuda.pointwise", &shapes, |solver, p| solver.configs(p).collect());
}

/// cuda.grouped_mma in every direction, up to 64 configs spread over each space, on grouped
/// problems with 8 to 64 channels per group: tiles past the destination's edges, strides
/// (backward-data's taps the stride does not divide, a 1x1 at stride 2 whose odd pixels no
/// tap reaches), a 5x5, dilation with pads over the filter's span, blocks of groups past the
/// last, 1D and 3D; backward-weight with 8, 24 and 64 output channels per group (one, three
/// and eight accumulator columns), blocks walking one or several output tiles.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_grouped_mma_on_medium_problems() {
    let (_time, _gpu, rt) = (Stopwatch::start("grouped_mma medium"), shared_gpu(), runtime());
    let shapes = [
        "n2:c64:k64:i15x13:f3x3:s1x1:p1x1:d1x1:g8",
        "n2:c128:k128:i14x14:f3x3:s2x2:p1x1:d1x1:g8",
        "n1:c96:k192:i9x11:f3x3:s1x1:p1x1:d1x1:g3",
        "n2:c64:k96:i12x12:f5x5:s2x2:p2x2:d1x1:g4",
        "n1:c256:k256:i7x7:f3x3:s1x1:p3x3:d2x2:g4",
        "n2:c128:k128:i16x16:f1x1:s2x2:p0x0:d1x1:g16",
        "n2:c48:k48:i40:f3:s3:p1:d1:g6",
        "n2:c32:k32:i6x7x7:f3x3x3:s1x2x2:p1x1x1:d1x1x1:g4",
    ];
    // A spread of up to 48 over the space (backward-weight's is the widest), sampled.
    let mut covered = HashSet::new();
    let configs = |solver: &dyn Solver, p: &ConvProblem| {
        let space: Vec<Config> = solver.configs(p).collect();
        let taken = space.len().min(48);
        let spread = (0..taken).map(|i| space[(2 * i + 1) * space.len() / (2 * taken)].clone()).collect();
        sample_configs(solver, p, spread, &mut covered, SAMPLED_EXTRA)
    };
    list_misses(rt, "cuda.grouped_mma", &shapes, configs);
}

/// cuda.igemm_wgmma (sm_90 only), a sample of its configs, on problems its channel rules admit: row
/// tiles crossing images, column tiles past K/G, strides (backward-data's sub-pixel phases,
/// phases no tap reaches, a stride with a dilation that shares a factor), dilation, pads
/// (wider than the filter reaches too), groups, a 1x1 and a wide 1x3, 1D and 3D, dense
/// channels short of a TMA row (and grouped ones refused), RGB stems packed; failures
/// listed with where they miss. Backward-weight too (tf32's tiles transposed in shared
/// memory), its slices of the pixels summed by atomics, in two stages and in the cluster, and
/// stream-K (small problems cut every tile between CTAs of a block or two each, large ones a
/// few).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_wgmma_implicit_gemm_on_medium_problems() {
    let (_time, _gpu, rt) = (Stopwatch::start("igemm_wgmma medium"), shared_gpu(), runtime());
    let shapes = [
        "n2:c64:k64:i9x11:f3x3:s1x1:p1x1:d1x1",
        "n1:c128:k72:i15x13:f3x3:s2x2:p1x1:d1x1",
        "n2:c128:k128:i8x8:f1x1:s1x1:p0x0:d1x1:g2",
        "n1:c64:k136:i12x12:f5x5:s1x1:p2x2:d2x2",
        "n1:c64:k128:i12x12:f3x3:s1x1:p2x2:d2x2",
        "n3:c192:k256:i7x7:f3x3:s1x1:p1x1:d1x1",
        "n1:c64:k64:i3x300:f1x3:s1x1:p0x1:d1x1",
        "n1:c72:k128:i6x7:f1x1:s1x1:p1x1:d1x1",
        "n2:c256:k512:i10x10:f3x3:s1x1:p1x1:d1x1:g2",
        "n2:c64:k64:i15x13:f3x3:s2x2:p1x1:d1x1",
        "n2:c64:k128:i9x10:f1x1:s2x2:p0x0:d1x1",
        "n1:c72:k64:i16x14:f3x3:s3x3:p2x2:d2x2",
        "n2:c128:k128:i13x13:f4x4:s2x2:p1x1:d1x1:g2",
        "n2:c64:k64:i50:f5:s2:p2:d1",
        "n2:c64:k64:i5x9x9:f3x3x3:s1x1x1:p1x1x1:d1x1x1",
        "n1:c64:k128:i6x7x7:f3x3x3:s2x2x2:p1x1x1:d1x1x1",
        // More tiles than a persistent grid has clusters, at every tile.
        "n8:c64:k256:i48x48:f3x3:s1x1:p1x1:d1x1",
        // Dense channels short of a 128-byte row: the maps' zeros fill the last block of a tap.
        "n2:c24:k144:i14x14:f1x1:s1x1:p0x0:d1x1",
        "n1:c40:k104:i9x11:f3x3:s2x2:p1x1:d1x1",
        "n1:c8:k16:i5x6x6:f3x3x3:s1x1x1:p1x1x1:d1x1x1",
        // Too few channels for a TMA row: the taps along W packed into them (RGB stems).
        "n2:c3:k16:i17x19:f7x7:s2x2:p3x3:d1x1",
        "n1:c3:k32:i15x15:f3x3:s2x2:p1x1:d1x1",
        "n2:c3:k24:i16x16:f4x4:s4x4:p0x0:d1x1",
        "n1:c3:k8:i4x9x9:f3x5x5:s1x2x2:p1x2x2:d1x1x1",
        // Too few channels per group for a TMA row: the groups blocked into rows (ResNeXt's).
        "n2:c128:k128:i9x9:f3x3:s1x1:p1x1:d1x1:g4",
        "n1:c64:k128:i8x8:f3x3:s2x2:p1x1:d1x1:g8",
        "n2:c128:k128:i7x7:f3x3:s1x1:p1x1:d1x1:g32",
        // Fewer output channels a group than input channels, backward-data in phases; groups
        // of 16 and 8 blocked four and eight to a row (their filter written by the kernel's
        // helper warps, a group's rows spanning two blocks of the reduction in the second).
        "n1:c64:k32:i9x9:f3x3:s2x2:p1x1:d1x1:g4",
        "n1:c64:k64:i9x9:f3x3:s2x2:p1x1:d1x1:g4",
        "n2:c64:k64:i7x7:f3x3:s1x1:p1x1:d1x1:g8",
        // More units than SMs, so that a CTA's run of units crosses groups (`hl 1` at 9 stages
        // loads a group's filter once a run).
        "n32:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1:g8",
    ];
    // From every tile shape without clusters or a persistent grid, and with them at three
    // stages (and `hl 1`'s nine); the splits (backward-weight's 17, the others' up to 11) on the
    // smallest tile shape, sums in the cluster on two consumers in pairs of CTAs (clusters of 4
    // and 8), and stream-K on every tile shape at three stages: a sample in which every value
    // of every field runs in each direction and type.
    let sampled = |c: &Config| {
        let plain = c.get("cl") == Some(1) && c.get("ps") == Some(0) && c.get("red") != Some(3);
        let smallest = [c.get("bn"), c.get("wg"), c.get("st")] == [Some(64), Some(1), Some(3)];
        let paired_cluster_sums = c.get("red") == Some(2)
            && [c.get("bn"), c.get("wg"), c.get("st"), c.get("cl")] == [Some(128), Some(2), Some(3), Some(2)];
        (plain || c.get("st") == Some(3) || c.get("st") == Some(9))
            && (c.get("ks").is_none_or(|ks| ks == 1) || smallest || paired_cluster_sums)
    };
    let mut covered = HashSet::new();
    list_misses(rt, "cuda.igemm_wgmma", &shapes, |solver, p| {
        sample_configs(solver, p, solver.configs(p).filter(sampled).collect(), &mut covered, SAMPLED_EXTRA)
    });
    let grouped = ConvProblem::from_key("v1:fwd:bf16:NHWC:n1:c48:k48:i8x8:f3x3:s1x1:p1x1:d1x1:g2").unwrap();
    let reason = rt.solver("cuda.igemm_wgmma").unwrap().applicable(&grouped).unwrap_err().to_string();
    assert!(reason.contains("grouped layer"), "{reason}");
}

/// cuda.igemm_tc and cuda.igemm_simt on problems with many reduction tiles, several row and column
/// tiles and real split-K, which the small random problems rarely reach.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_implicit_gemm_on_medium_problems() {
    let (_time, _gpu, rt) = (Stopwatch::start("igemm_tc/simt medium"), shared_gpu(), runtime());
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
    let problems: Vec<ConvProblem> = shapes.into_iter().flat_map(channels_last_variants).collect();
    prebuild_checks(rt, &problems, 3, |s| s.id().starts_with("cuda.igemm"));
    for p in &problems {
        check_solvers(rt, p, 3, |s| s.id().starts_with("cuda.igemm")).unwrap();
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_conversions_between_layer_formats_match_the_host() {
    let (_time, _gpu) = (Stopwatch::start("conversions"), shared_gpu());
    check_conversions(runtime()).unwrap();
}

/// The solvers the sharing tests run: a vendor library of each kind and own kernels with and
/// without clusters, stream-K's waiting CTAs among them.
const SHARING_SOLVERS: [&str; 4] = ["cuda.cudnn", "cuda.gemm_blas", "cuda.igemm_wgmma", "cuda.igemm_tc"];

/// Each sharing solver that applies to `key`, verified against the reference (its default and
/// one more config; stream-K's too where it has one), then timed by graph replay.
fn verified_and_timed(rt: &dyn Runtime, key: &str) -> Result<(), String> {
    let p = ConvProblem::from_key(key).map_err(|e| e.to_string())?;
    check_solvers(rt, &p, 1, |s| SHARING_SOLVERS.contains(&s.id()))?;
    for solver in rt.solvers().into_iter().filter(|s| SHARING_SOLVERS.contains(&s.id()) && s.applicable(&p).is_ok()) {
        let what = |config: &Config| format!("{} {config} on {key}", solver.id());
        let stream_k = solver.configs(&p).find(|c| c.get("red") == Some(3));
        for config in std::iter::once(solver.default_config(&p)).chain(stream_k) {
            let _watched = watch_for(RUN_LIMIT, what(&config));
            let solution = rt.build(solver.id(), &p, config.clone()).map_err(|e| format!("{}: {e}", what(&config)))?;
            let mut data = rt.upload(&p, &ConvTensors::random(&p, 5)).map_err(|e| format!("{}: {e}", what(&config)))?;
            let checked = data.run_checked(&solution).map_err(|e| format!("{}: {e}", what(&config)))?;
            if !checked.passed && !solver.find_times_every_config() {
                return Err(format!("{}: error {:e} > {:e}", what(&config), checked.max_error, checked.tolerance));
            }
            let mut timer =
                data.timer(&solution, TimingOptions::default()).map_err(|e| format!("{}: {e}", what(&config)))?;
            let seconds = timer.sample().map_err(|e| format!("{}: {e}", what(&config)))?;
            if timer.method() != TimingMethod::GraphReplay || !(seconds.is_finite() && seconds > 0.0) {
                return Err(format!("{}: timed {seconds} s by {:?}", what(&config), timer.method()));
            }
        }
    }
    Ok(())
}

/// Problems for the sharing tests: dense, grouped and 1x1 layers in 16-bit types and tf32, and
/// backward-weight on few tiles over many pixels (where stream-K runs).
const SHARED_PROBLEMS: [&str; 6] = [
    "v1:fwd:bf16:NHWC:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1",
    "v1:bwd-weight:bf16:NHWC:n16:c64:k64:i7x7:f1x1:s1x1:p0x0:d1x1",
    "v1:fwd:f16:NHWC:n4:c64:k128:i14x14:f1x1:s1x1:p0x0:d1x1",
    "v1:bwd-data:bf16:NHWC:n2:c128:k128:i14x14:f3x3:s1x1:p1x1:d1x1:g2",
    "v1:bwd-weight:f16:NHWC:n8:c128:k128:i14x14:f3x3:s1x1:p1x1:d1x1",
    "v1:fwd:tf32:NHWC:n2:c64:k64:i14x14:f3x3:s2x2:p1x1:d1x1",
];

/// Runtimes made, used and dropped while the process's shared runtime keeps running verified
/// and timed work in another thread: neither disturbs the other (the primary context, the
/// vendor handles, the kernel cache on disk and graph captures are shared or side by side).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_runtimes_come_and_go_beside_verified_work() {
    let (_time, _gpu) = (Stopwatch::start("runtimes come and go"), shared_gpu());
    let (stop, rounds) = (AtomicBool::new(false), AtomicUsize::new(0));
    std::thread::scope(|scope| {
        let steady = scope.spawn(|| -> Result<(), String> {
            while !stop.load(Ordering::Relaxed) {
                SHARED_PROBLEMS.iter().try_for_each(|key| verified_and_timed(runtime(), key))?;
                rounds.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
        for round in 0..3 {
            let other = CudaRuntime::probe(Some(std::env::temp_dir().join("gconv-test-kernels"))).unwrap();
            for key in SHARED_PROBLEMS.iter().skip(round).step_by(2) {
                verified_and_timed(&other, key).unwrap_or_else(|e| panic!("a runtime of its own, round {round}: {e}"));
            }
            drop(other);
        }
        stop.store(true, Ordering::Relaxed);
        steady.join().unwrap().unwrap_or_else(|e| panic!("the shared runtime beside them: {e}"));
    });
    assert!(rounds.load(Ordering::Relaxed) >= 1);
}

/// Threads of one runtime run solvers at once, each on workloads of its own (its own stream):
/// verified runs and graph captures side by side, stream-K's grids among them.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_solvers_run_from_several_threads() {
    let (_time, _gpu) = (Stopwatch::start("several threads"), shared_gpu());
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let key = SHARED_PROBLEMS[t % SHARED_PROBLEMS.len()];
                scope.spawn(move || {
                    (0..2).try_for_each(|_| verified_and_timed(runtime(), key)).map_err(|e| format!("thread {t}: {e}"))
                })
            })
            .collect();
        let failures: Vec<String> = threads.into_iter().filter_map(|t| t.join().unwrap().err()).collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}
