//! The tile logic without a GPU: defaults valid, configs round-trip, bad configs say why.

use gconv_core::testing::{channels_last_variants, small_problem};
use proptest::prelude::*;

use gconv_core::{ConvProblem, DataType, GconvError, Layout};

use super::tile::Tile;
use super::{Math, Planner};
use crate::device::SmLimits;

/// An H100's limits: the tile logic needs no GPU.
fn planner(math: Math) -> Planner {
    let sm = SmLimits::HOPPER;
    Planner { math, sm_count: 132, sm }
}

/// The maths that run the problem: tf32 runs on both.
fn maths_of(p: &ConvProblem) -> Vec<Math> {
    match p.dtype {
        DataType::F32 => vec![Math::Simt],
        DataType::Tf32 => vec![Math::Simt, Math::TensorCores],
        _ => vec![Math::TensorCores],
    }
}

#[test]
fn carveout_fits_the_blocks_registers_allow() {
    let plan = planner(Math::TensorCores);
    // 256 threads of a 76.8 KB tile: two blocks at 126 registers, one at 155.
    assert_eq!(plan.carveout_percent(256, 126, 76800), 67);
    assert_eq!(plan.carveout_percent(256, 155, 76800), 34);
    // Small tiles stop at the SM's warp slots; without shared memory only the driver's
    // reserve per block is asked for.
    assert_eq!(plan.carveout_percent(32, 32, 4096), 71);
    assert_eq!(plan.carveout_percent(128, 64, 0), 4);
}

fn check_default(plan: &Planner, p: &ConvProblem) {
    let tile = plan.default_tile(p);
    assert_eq!(tile.check(plan, p), Ok(()), "default {tile:?} of {}", p.key());
    let config = tile.to_config(plan.math, p.direction);
    assert_eq!(Tile::from_config(plan, p, &config).unwrap(), tile, "{config} of {}", p.key());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn defaults_and_the_config_space_are_valid(p in small_problem().prop_filter("NHWC", |p| p.layout == Layout::Nhwc)) {
        for math in maths_of(&p) {
            let plan = planner(math);
            check_default(&plan, &p);
            let mut count = 0;
            for tile in plan.candidate_tiles().into_iter().filter(|t| t.check(&plan, &p).is_ok()) {
                let config = tile.to_config(plan.math, p.direction);
                prop_assert_eq!(Tile::from_config(&plan, &p, &config).unwrap(), tile);
                count += 1;
            }
            prop_assert!(count > 0, "no valid tile for {}", p.key());
        }
    }
}

#[test]
fn real_layers_get_valid_defaults() {
    let shapes = [
        "n32:c3:k64:i224x224:f7x7:s2x2:p3x3:d1x1",
        "n32:c128:k128:i56x56:f3x3:s1x1:p1x1:d1x1:g32",
        "n32:c512:k512:i7x7:f3x3:s1x1:p1x1:d1x1",
        "n32:c1024:k2048:i14x14:f1x1:s2x2:p0x0:d1x1",
        "n32:c3:k64:i16x112x112:f3x7x7:s1x2x2:p1x3x3:d1x1x1",
        "n32:c960:k960:i7x7:f5x5:s1x1:p2x2:d1x1:g960",
    ];
    for p in shapes.into_iter().flat_map(channels_last_variants) {
        for math in maths_of(&p) {
            check_default(&planner(math), &p);
        }
    }
}

#[test]
fn bad_configs_say_why() {
    let p = ConvProblem::from_key("v1:bwd-weight:bf16:NHWC:n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1").unwrap();
    let plan = planner(Math::TensorCores);
    let reason = |text: &str| match Tile::from_config(&plan, &p, &text.parse().unwrap()) {
        Err(GconvError::BadConfig { reason, .. }) => reason,
        other => panic!("{text}: expected a bad config, got {other:?}"),
    };
    assert!(reason("bm64_bn64_bk32_wm2_wn2_st3").contains("expected bm<32|64|128|256>_bn<"));
    assert!(reason("bm48_bn64_bk32_wm2_wn2_st3_ks1_red0").contains("bm must be"));
    assert!(reason("bm64_bn64_bk32_wm2_wn2_st3_ks4_red2").contains("red must be"));
    assert!(reason("bm128_bn128_bk32_wm1_wn1_st3_ks1_red0").contains("warp tile"));
    let small_gpu = Planner { sm: SmLimits { block_shared_bytes: 99 * 1024, ..plan.sm }, ..plan };
    let config = "bm256_bn128_bk64_wm4_wn2_st4_ks1_red0".parse().unwrap();
    assert!(Tile::from_config(&plan, &p, &config).is_ok());
    assert!(
        matches!(Tile::from_config(&small_gpu, &p, &config), Err(GconvError::BadConfig { reason, .. }) if reason.contains("shared memory"))
    );
    assert!(reason("bm64_bn64_bk32_wm2_wn2_st3_ks3_red0").contains("ks must be"));
    assert!(Tile::from_config(&plan, &p, &"bm64_bn64_bk32_wm2_wn2_st3_ks16_red1".parse().unwrap()).is_ok());
}

/// The default config of the problem of `key`, as text.
fn default_config(plan: &Planner, key: &str) -> String {
    let p = ConvProblem::from_key(key).unwrap();
    plan.default_tile(&p).to_config(plan.math, p.direction).to_string()
}

#[test]
fn one_pixel_backward_weight_takes_one_deep_tile_with_the_least_padding() {
    let plan = planner(Math::TensorCores);
    let default = |shape: &str| default_config(&plan, &format!("v1:bwd-weight:bf16:NHWC:{shape}"));
    // The fastest of 92 tiles on the H100 (or within 2%): one 32-deep step holds the 32 pixels.
    assert_eq!(default("n32:c144:k6:i1x1:f1x1:s1x1:p0x0:d1x1"), "bm32_bn32_bk32_wm2_wn2_st3_ks1_red0");
    assert_eq!(default("n32:c6:k144:i1x1:f1x1:s1x1:p0x0:d1x1"), "bm64_bn16_bk32_wm4_wn1_st3_ks1_red0");
    assert_eq!(default("n32:c64:k64:i56x56:f3x3:s1x1:p1x1:d1x1").split('_').nth(2), Some("bk16"));
}

#[test]
fn simt_defaults_keep_large_tiles_busy_and_small_problems_spread() {
    let plan = planner(Math::Simt);
    let default = |key: &str| default_config(&plan, key);
    // On the H100 128 x 128 x 8 tiles (16 warps an SM) ran this layer in 0.72x the time of the
    // 64 x 64 x 16 ones the model took before it counted L2 traffic.
    assert_eq!(
        default("v1:bwd-weight:f32:NHWC:n32:c512:k512:i7x7:f3x3:s1x1:p1x1:d1x1"),
        "bm128_bn128_bk8_st3_ks4_red0"
    );
    // One 32-row GEMM: 4 x 4 outputs a thread rather than 8 x 8, 28.9 -> 8.9 us.
    assert_eq!(default("v1:fwd:f32:NHWC:n32:c240:k10:i1x1:f1x1:s1x1:p0x0:d1x1"), "bm32_bn32_bk16_st3");
}
