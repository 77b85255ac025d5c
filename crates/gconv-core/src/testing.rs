//! Random problems for property tests of every crate: small enough for the reference to be
//! quick, wide enough to reach every rank, group shape, stride, padding and dilation.

use proptest::prelude::*;

use crate::problem::{ConvProblem, DataType, Direction, Layout, SpatialDim};

fn spatial_dim(max_input: u32) -> impl Strategy<Value = SpatialDim> {
    (1..=max_input, 1..=3u32, 1..=3u32, 0..=2u32, 1..=2u32)
        .prop_map(|(input, filter, stride, pad, dilation)| SpatialDim { input, filter, stride, pad, dilation })
}

/// (G, C/G, K/G): dense, grouped and depthwise shapes.
fn group_shape() -> impl Strategy<Value = (u32, u32, u32)> {
    prop_oneof![
        (Just(1u32), 1..=6u32, 1..=6u32),
        (2..=4u32, 1..=3u32, 1..=3u32),
        (2..=6u32).prop_map(|g| (g, 1, 1)),
    ]
}

/// A valid problem of any direction, data type and layout.
pub fn small_problem() -> impl Strategy<Value = ConvProblem> {
    (1..=3usize)
        .prop_flat_map(|rank| {
            let max_input = [9, 7, 5][rank - 1];
            (
                prop::collection::vec(spatial_dim(max_input), rank),
                group_shape(),
                1..=3u32,
                prop::sample::select(Direction::ALL.to_vec()),
                prop::sample::select(DataType::ALL.to_vec()),
                prop::sample::select(Layout::ALL.to_vec()),
            )
        })
        .prop_map(|(dims, (g, cg, kg), n, direction, dtype, layout)| ConvProblem {
            direction,
            dtype,
            layout,
            n,
            c: g * cg,
            k: g * kg,
            g,
            dims,
        })
        .prop_filter("output size must be positive", |p| p.validate().is_ok())
}
