//! The plans of plain 1x1 problems run on the host, cuBLAS's column-major strided-batched GEMM
//! and the sum over images written out in fp64, against the reference: every operand's offset,
//! leading dimension and stride is checked without a GPU.

use std::collections::HashMap;

use gconv_core::reference::reference;
use gconv_core::{Config, ConvProblem, ConvTensors};

use super::plan::{plan, Step};
use super::{
    check_tunable_config, chunk_configs, chunk_rows, images_per_chunk, reduction_split, tunable_configs,
    weight_elements, Gemm, Operand, Role, PARTIALS_BYTES,
};

/// The host's copies of the tensors and workspace regions a plan names.
struct Memory {
    x: Vec<f64>,
    w: Vec<f64>,
    y: Vec<f64>,
    sum: Vec<f64>,
    partials: Vec<f64>,
    /// Pitched copies by their place in the workspace, NaN where not written: a GEMM reading a
    /// row's padding would spread NaN into the output.
    pitched: HashMap<u64, Vec<f64>>,
}

impl Memory {
    fn tensor(&mut self, role: Role) -> &mut Vec<f64> {
        match role {
            Role::X => &mut self.x,
            Role::W => &mut self.w,
            Role::Y => &mut self.y,
            Role::Sum => &mut self.sum,
            Role::Partials { .. } => &mut self.partials,
            Role::Pitched { after } => {
                let room = 8 * (self.x.len() + self.y.len() + 8);
                self.pitched.entry(after).or_insert_with(|| vec![f64::NAN; room])
            }
            Role::Col => panic!("plain 1x1 problems have no column matrix"),
        }
    }

    fn pitch(&mut self, (from, to): (Role, Role), rows: i32, width: i32, (from_ld, to_ld): (i32, i32)) {
        for row in 0..rows as usize {
            for at in 0..width as usize {
                let value = self.tensor(from)[row * from_ld as usize + at];
                self.tensor(to)[row * to_ld as usize + at] = value;
            }
        }
    }

    /// Element (row, col) of op(M) for batch step `b`: column-major with leading dimension ld,
    /// stored transposed where `transposed`.
    fn at(&mut self, o: &Operand, b: i64, transposed: bool, row: i64, col: i64) -> f64 {
        let (r, c) = if transposed { (col, row) } else { (row, col) };
        self.tensor(o.tensor)[(o.offset + b * o.stride + r + c * i64::from(o.ld)) as usize]
    }

    fn gemm(&mut self, g: &Gemm) {
        for b in 0..i64::from(g.batch) {
            for i in 0..i64::from(g.m) {
                for j in 0..i64::from(g.n) {
                    let product: f64 = (0..i64::from(g.k))
                        .map(|l| self.at(&g.a, b, g.trans_a, i, l) * self.at(&g.b, b, g.trans_b, l, j))
                        .sum();
                    let at = (g.c.offset + b * g.c.stride + i + j * i64::from(g.c.ld)) as usize;
                    self.tensor(g.c.tensor)[at] = product;
                }
            }
        }
    }

    fn sum_images(&mut self, images: usize, first: bool, last: bool) {
        let total = self.w.len();
        for i in 0..total {
            let s =
                if first { 0.0 } else { self.sum[i] } + (0..images).map(|m| self.partials[m * total + i]).sum::<f64>();
            if last {
                self.w[i] = s;
            } else {
                self.sum[i] = s;
            }
        }
    }
}

/// Runs the plan of `key` with `config` and partials of at most `budget` bytes a chunk; returns
/// the output against the reference's, and the number of GEMM launches.
fn run(key: &str, config: &Config, budget: u64) -> (Vec<f64>, Vec<f64>, usize) {
    let p = ConvProblem::from_key(key).expect("a valid key");
    let t = ConvTensors::random(&p, 7);
    let host = |v: &gconv_core::Tensor| v.to_f32().iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let weights = weight_elements(&p) as usize;
    let mut memory = Memory {
        x: host(&t.x),
        w: host(&t.w),
        y: host(&t.y),
        sum: vec![f64::NAN; weights],
        partials: vec![
            f64::NAN;
            weights
                * reduction_split(&p, budget, chunk_rows(config))
                    .map_or(p.n as usize, |(chunks, _)| chunks as usize)
        ],
        pitched: HashMap::new(),
    };
    let steps = plan(&p, config, budget);
    let launches = steps.iter().filter(|s| matches!(s, Step::Gemm(_))).count();
    for step in &steps {
        match *step {
            Step::Gemm(ref g) => memory.gemm(g),
            Step::SumImages { images, first, last } => memory.sum_images(images as usize, first, last),
            Step::Pitch { from, to, rows, width, from_ld, to_ld } => {
                memory.pitch((from, to), rows, width, (from_ld, to_ld))
            }
            Step::Im2col | Step::Col2im => panic!("plain 1x1 problems have no column matrix"),
        }
    }
    let out = memory.tensor(match p.direction {
        gconv_core::Direction::Forward => Role::Y,
        gconv_core::Direction::BackwardData => Role::X,
        gconv_core::Direction::BackwardWeight => Role::W,
    });
    (out.clone(), reference(&p, &t), launches)
}

fn assert_matches(key: &str, budget: u64) -> usize {
    assert_config_matches(key, &Config::empty(), budget)
}

fn assert_config_matches(key: &str, config: &Config, budget: u64) -> usize {
    let (got, want, launches) = run(key, config, budget);
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-9 * scale, "{key}: element {i} is {g}, the reference {w}");
    }
    launches
}

#[test]
fn plain_plans_compute_every_direction_layout_and_grouping() {
    for direction in ["fwd", "bwd-data", "bwd-weight"] {
        for (layout, dims) in [
            ("NCHW", "i5x3:f1x1:s1x1:p0x0:d1x1"),
            ("NHWC", "i5x3:f1x1:s1x1:p0x0:d1x1"),
            ("NCDHW", "i2x3x2:f1x1x1:s1x1x1:p0x0x0:d1x1x1"),
            ("NCW", "i7:f1:s1:p0:d1"),
        ] {
            for (n, groups) in [(1, ""), (3, ""), (3, ":g2"), (2, ":g4"), (5, ":g4")] {
                assert_matches(&format!("v1:{direction}:f32:{layout}:n{n}:c8:k12:{dims}{groups}"), 64 << 20);
            }
        }
    }
}

#[test]
fn nchw_batches_over_images_or_groups_whichever_launches_fewer() {
    // One group: a single GEMM over the 6 images (the weights' stride 0).
    assert_eq!(assert_matches("v1:fwd:f32:NCHW:n6:c4:k4:i3x3:f1x1:s1x1:p0x0:d1x1", 64 << 20), 1);
    // Two groups, six images: a GEMM a group.
    assert_eq!(assert_matches("v1:bwd-data:f32:NCHW:n6:c4:k4:i3x3:f1x1:s1x1:p0x0:d1x1:g2", 64 << 20), 2);
    // Four groups, two images: a GEMM an image.
    assert_eq!(assert_matches("v1:fwd:f32:NCHW:n2:c8:k8:i3x3:f1x1:s1x1:p0x0:d1x1:g4", 64 << 20), 2);
    // Backward-weight: one GEMM over every (image, group) pair.
    assert_eq!(assert_matches("v1:bwd-weight:f32:NCHW:n6:c8:k8:i3x3:f1x1:s1x1:p0x0:d1x1:g4", 64 << 20), 1);
}

#[test]
fn nchw_backward_weight_sums_chunks_of_images_within_the_budget() {
    let key = "v1:bwd-weight:f32:NCHW:n7:c8:k12:i4x3:f1x1:s1x1:p0x0:d1x1:g2";
    let partial_bytes = 12 * 4 * 4;
    // Two images a chunk: four chunks, the last of one image.
    assert_eq!(assert_matches(key, 2 * partial_bytes), 4);
    // A budget under one image's partial still takes one image a chunk.
    assert_eq!(assert_matches(key, 1), 7);
    // 2,048 groups of one channel: 8 KiB of partials an image, but 31 images a batch of
    // (image, group) pairs within 65,535.
    let depthwise = ConvProblem::from_key("v1:bwd-weight:bf16:NCHW:n64:c2048:k2048:i7x7:f1x1:s1x1:p0x0:d1x1:g2048");
    assert_eq!(images_per_chunk(&depthwise.unwrap(), PARTIALS_BYTES), 31);
}

#[test]
fn nhwc_backward_weight_splits_a_long_grouped_reduction_into_summed_chunks() {
    let split = |key: &str, budget| reduction_split(&ConvProblem::from_key(key).unwrap(), budget, None);
    // 10,243 pixels, two groups: five chunks, four of 2,049 rows batched a group and the last
    // apart, then the sum.
    let ragged = "v1:bwd-weight:f32:NHWC:n1:c8:k8:i10243x1:f1x1:s1x1:p0x0:d1x1:g2";
    assert_eq!(split(ragged, PARTIALS_BYTES), Some((5, 2049)));
    assert_eq!(assert_matches(ragged, 64 << 20), 4);
    // 4,099 pixels: two chunks, a GEMM each over both groups.
    let two = "v1:bwd-weight:f32:NHWC:n1:c8:k8:i4099x1:f1x1:s1x1:p0x0:d1x1:g2";
    assert_eq!(split(two, PARTIALS_BYTES), Some((2, 2050)));
    assert_eq!(assert_matches(two, 64 << 20), 2);
    // Four groups over two even chunks: a GEMM a chunk, batched over the groups.
    assert_eq!(assert_matches("v1:bwd-weight:f32:NHWC:n16:c8:k8:i16x16:f1x1:s1x1:p0x0:d1x1:g4", 64 << 20), 2);
    // Two groups over four even chunks: a GEMM a group, batched over its chunks; a budget of
    // two partials splits in two.
    let budgeted = "v1:bwd-weight:f32:NHWC:n8:c4:k6:i32x32:f1x1:s1x1:p0x0:d1x1:g2";
    assert_eq!(split(budgeted, PARTIALS_BYTES), Some((4, 2048)));
    assert_eq!(assert_matches(budgeted, 64 << 20), 2);
    assert_eq!(split(budgeted, 2 * 12 * 4), Some((2, 4096)));
    assert_eq!(assert_matches(budgeted, 2 * 12 * 4), 2);
    // Not split: one group, a short reduction, groups whose tiles fill the GPU.
    for key in [
        "v1:bwd-weight:f32:NHWC:n32:c256:k256:i56x56:f1x1:s1x1:p0x0:d1x1",
        "v1:bwd-weight:f32:NHWC:n1:c8:k8:i60x60:f1x1:s1x1:p0x0:d1x1:g2",
        "v1:bwd-weight:f32:NHWC:n32:c2048:k2048:i14x14:f1x1:s1x1:p0x0:d1x1:g4",
    ] {
        assert_eq!(split(key, PARTIALS_BYTES), None, "{key}");
    }
    // The 3.5 ms layer: 92,416 pixels, 8 groups of 32 x 64: 32 chunks of 2,888, a GEMM a group.
    let slow = "v1:bwd-weight:f32:NHWC:n256:c256:k512:i19x19:f1x1:s1x1:p0x0:d1x1:g8";
    assert_eq!(split(slow, PARTIALS_BYTES), Some((32, 2888)));
    let steps = plan(&ConvProblem::from_key(slow).unwrap(), &Config::empty(), PARTIALS_BYTES);
    assert_eq!(steps.iter().filter(|s| matches!(s, Step::Gemm(_))).count(), 8);
}

#[test]
fn a_tuned_chunk_length_splits_the_reduction_so_and_is_checked() {
    let chunked = |rows: u32| Config::new([("kc", rows)]);
    // 10,243 pixels in chunks of 1,024: ten full chunks a GEMM a group, the last 3 rows apart.
    let ragged = "v1:bwd-weight:f32:NHWC:n1:c8:k8:i10243x1:f1x1:s1x1:p0x0:d1x1:g2";
    let p = ConvProblem::from_key(ragged).unwrap();
    assert_eq!(reduction_split(&p, PARTIALS_BYTES, Some(1024)), Some((11, 1024)));
    assert_eq!(assert_config_matches(ragged, &chunked(1024), 64 << 20), 4);
    // In three chunks (two of 4,096, one of 2,051): a GEMM a chunk over both groups.
    assert_eq!(assert_config_matches(ragged, &chunked(4096), 64 << 20), 3);
    // A chunk as long as the rows leaves one: no split.
    assert_eq!(reduction_split(&p, PARTIALS_BYTES, Some(8192)), Some((2, 8192)));
    assert_eq!(reduction_split(&p, PARTIALS_BYTES, Some(16384)), None);

    // The slow layer of 2026-11-29 (32 groups of 8 x 16, 93,312 rows): every length splits it.
    let slow = ConvProblem::from_key("v1:bwd-weight:f32:NHWC:n128:c256:k512:i27x27:f1x1:s1x1:p0x0:d1x1:g32").unwrap();
    let configs: Vec<String> = chunk_configs(&slow).iter().map(|c| c.to_string()).collect();
    assert_eq!(configs, ["default", "kc1024", "kc2048", "kc4096", "kc8192", "kc16384"]);
    for c in chunk_configs(&slow) {
        check_tunable_config(&slow, &c).unwrap();
    }
    assert_eq!(reduction_split(&slow, PARTIALS_BYTES, Some(2048)), Some((46, 2048)));
    for bad in [chunked(3000), Config::new([("bm", 64)])] {
        assert!(check_tunable_config(&slow, &bad).is_err(), "{bad}");
    }
    // A problem it does not split has nothing to tune.
    let dense = ConvProblem::from_key("v1:bwd-weight:f32:NHWC:n32:c256:k256:i56x56:f1x1:s1x1:p0x0:d1x1").unwrap();
    assert!(chunk_configs(&dense).is_empty());
    check_tunable_config(&dense, &Config::empty()).unwrap();
    assert!(check_tunable_config(&dense, &chunked(2048)).is_err());
}

#[test]
fn misaligned_channels_first_rows_run_from_pitched_copies() {
    let pitched = Config::new([("ld", 16)]);
    // 15 pixels a row: 30 bytes in half precision, padded to 16 elements.
    for direction in ["fwd", "bwd-data", "bwd-weight"] {
        for dtype in ["f16", "bf16"] {
            for (n, groups) in [(1, ""), (3, ""), (3, ":g2"), (2, ":g4"), (5, ":g4")] {
                let key = format!("v1:{direction}:{dtype}:NCHW:n{n}:c8:k12:i5x3:f1x1:s1x1:p0x0:d1x1{groups}");
                let p = ConvProblem::from_key(&key).unwrap();
                assert_eq!(tunable_configs(&p), [Config::empty(), pitched.clone()], "{key}");
                check_tunable_config(&p, &pitched).unwrap();
                let copies = plan(&p, &pitched, 64 << 20).iter().filter(|s| matches!(s, Step::Pitch { .. })).count();
                assert_eq!(copies, 2, "{key}: one copy of x's rows and one of y's");
                assert_config_matches(&key, &pitched, 64 << 20);
            }
        }
    }
    // Backward-weight's images in chunks (two a chunk), their partials before the copies.
    assert_config_matches("v1:bwd-weight:bf16:NCHW:n7:c8:k12:i3x3:f1x1:s1x1:p0x0:d1x1:g2", &pitched, 2 * 12 * 4 * 4);
    // 1D and 3D rows of 7 and 12 elements.
    assert_config_matches("v1:fwd:bf16:NCW:n2:c4:k6:i7:f1:s1:p0:d1", &pitched, 64 << 20);
    assert_config_matches("v1:bwd-data:bf16:NCDHW:n2:c4:k6:i2x3x2:f1x1x1:s1x1x1:p0x0x0:d1x1x1", &pitched, 64 << 20);
    // Aligned rows (16 pixels in bf16), fp32 (4-byte rows run as fast), channels-last and the
    // explicit path: nothing to pad.
    for key in [
        "v1:fwd:bf16:NCHW:n2:c8:k8:i4x4:f1x1:s1x1:p0x0:d1x1",
        "v1:fwd:f32:NCHW:n2:c8:k8:i5x3:f1x1:s1x1:p0x0:d1x1",
        "v1:fwd:bf16:NHWC:n2:c8:k8:i5x3:f1x1:s1x1:p0x0:d1x1",
        "v1:fwd:bf16:NHWC:n2:c8:k8:i5x3:f3x3:s1x1:p1x1:d1x1",
    ] {
        let p = ConvProblem::from_key(key).unwrap();
        assert!(tunable_configs(&p).is_empty(), "{key}");
        assert!(check_tunable_config(&p, &pitched).is_err(), "{key}");
    }
    let p = ConvProblem::from_key("v1:fwd:bf16:NCHW:n2:c8:k8:i5x3:f1x1:s1x1:p0x0:d1x1").unwrap();
    assert!(check_tunable_config(&p, &Config::new([("ld", 32)])).is_err(), "16 bytes only");
}
