//! Synthetic problem sets covering what real networks use, and the fixed split of shapes into
//! training and validation: a shape is a problem without its direction and data type, so no
//! validation shape is a training shape in any direction or dtype.

use gconv_core::{ConvProblem, DataType, Direction, Layout, SpatialDim};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

/// The families drawn, each with its share of the set (percent).
const FAMILIES: [(Family, u32); 8] = [
    (Family::Pointwise, 20),
    (Family::Dense3x3, 22),
    (Family::DenseLarge, 8),
    (Family::Dilated, 5),
    (Family::Grouped, 15),
    (Family::Depthwise, 15),
    (Family::Volumetric, 10),
    (Family::Line, 5),
];

#[derive(Debug, Clone, Copy)]
enum Family {
    /// Dense 1x1, stride 1 or 2.
    Pointwise,
    Dense3x3,
    /// Dense 5x5 and 7x7 (stems, early layers).
    DenseLarge,
    /// Dense 3x3 with dilation 2 to 4 (segmentation backbones).
    Dilated,
    /// ResNeXt / RegNet style: 1 to 64 channels per group.
    Grouped,
    /// Depthwise 3x3, 5x5, 7x7.
    Depthwise,
    /// 3D: 1x1x1 and 3x3x3.
    Volumetric,
    /// 1D: kernels 3 to 9 over sequences.
    Line,
}

const BATCHES: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// Spatial sizes of real networks, with odd ones between them.
const SIZES: [u32; 20] = [1, 3, 5, 7, 9, 13, 14, 17, 19, 27, 28, 35, 38, 56, 64, 73, 112, 128, 149, 224];
const CHANNELS: [u32; 18] = [3, 8, 16, 24, 32, 40, 48, 64, 96, 128, 160, 192, 256, 384, 512, 768, 1024, 2048];
/// Odd channel counts: misaligned for vector loads.
const ODD_CHANNELS: [u32; 5] = [17, 33, 67, 129, 257];

/// What the generated problems may cost.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Smallest GFLOP per problem, once fitted: smaller draws are redrawn.
    pub min_gflop: f64,
    /// Largest GFLOP per problem; batch, then spatial size shrink to fit.
    pub max_gflop: f64,
    /// Largest tensor, in elements.
    pub max_elements: u64,
}

/// `count` distinct forward fp32 NHWC-family shapes drawn by `seed`; of the dense 2D draws with
/// a filter larger than 1x1, `factorized_percent` in a hundred get a factorized filter
/// instead ([`factorize`]). At 0 nothing more is drawn, so a seed's set is what it was before
/// the option.
pub fn synthetic(count: usize, seed: u64, limits: Limits, factorized_percent: u32) -> Vec<ConvProblem> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out: Vec<ConvProblem> = Vec::with_capacity(count);
    let mut tries = 0;
    while out.len() < count && tries < count * 100 {
        tries += 1;
        let mut p = draw(&mut rng);
        let dense_2d = p.g == 1 && p.rank() == 2 && p.dims.iter().all(|d| d.filter > 1);
        if factorized_percent > 0 && dense_2d && rng.random_range(0..100) < factorized_percent {
            factorize(&mut rng, &mut p);
        }
        let p = fit(p, limits);
        let large_enough = p.flops() >= limits.min_gflop * 1e9;
        if large_enough && p.validate().is_ok() && !out.iter().any(|q| shape_key(q) == shape_key(&p)) {
            out.push(p);
        }
    }
    out
}

fn pick<T: Copy>(rng: &mut SmallRng, values: &[T]) -> T {
    values[rng.random_range(0..values.len())]
}

fn channels(rng: &mut SmallRng) -> u32 {
    if rng.random_range(0..10) == 0 {
        pick(rng, &ODD_CHANNELS)
    } else {
        pick(rng, &CHANNELS)
    }
}

fn draw(rng: &mut SmallRng) -> ConvProblem {
    let mut roll = rng.random_range(0..100);
    let family = FAMILIES
        .iter()
        .find(|(_, share)| {
            roll < *share || {
                roll -= share;
                false
            }
        })
        .map_or(Family::Dense3x3, |f| f.0);
    let (mut c, mut k, mut g) = (channels(rng), channels(rng), 1);
    let stride = if rng.random_range(0..4) == 0 { 2 } else { 1 };
    let size = pick(rng, &SIZES);
    let square = |filter: u32, stride: u32, dilation: u32| {
        let dim = SpatialDim { input: size, filter, stride, pad: dilation * (filter / 2), dilation };
        vec![dim, dim]
    };
    let dims = match family {
        Family::Pointwise => square(1, stride, 1),
        Family::Dense3x3 => square(3, stride, 1),
        Family::DenseLarge => square(pick(rng, &[5, 7]), stride, 1),
        Family::Dilated => square(3, 1, pick(rng, &[2, 3, 4])),
        Family::Grouped => {
            let per_group = pick(rng, &[1, 2, 4, 8, 16, 32, 64]);
            g = pick(rng, &[2, 4, 8, 16, 32, 64]);
            c = per_group * g;
            k = c * pick(rng, &[1, 1, 2]);
            square(pick(rng, &[1, 3, 3]), stride, 1)
        }
        Family::Depthwise => {
            g = c;
            k = c;
            square(pick(rng, &[3, 5, 7]), stride, 1)
        }
        Family::Volumetric => {
            let filter = pick(rng, &[1, 3]);
            let depth =
                SpatialDim { input: pick(rng, &[2, 4, 8, 16]), filter, stride: 1, pad: filter / 2, dilation: 1 };
            let plane = SpatialDim { input: size.min(112), filter, stride, pad: filter / 2, dilation: 1 };
            vec![depth, plane, plane]
        }
        Family::Line => {
            let filter = pick(rng, &[3, 5, 7, 9]);
            vec![SpatialDim {
                input: pick(rng, &[16, 50, 128, 400, 1000]),
                filter,
                stride,
                pad: filter / 2,
                dilation: 1,
            }]
        }
    };
    let layout = match family {
        Family::Volumetric => Layout::Nhwc,
        _ => pick(rng, &Layout::ALL),
    };
    ConvProblem { direction: Direction::Forward, dtype: DataType::F32, layout, n: pick(rng, &BATCHES), c, k, g, dims }
}

/// A 1 x k or k x 1 filter (k of 3, 5, 7), padded along its long side only, in place of a 2D
/// square one: Inception's factorized 7x7 and 3x3 layers, which square filters do not cover.
fn factorize(rng: &mut SmallRng, p: &mut ConvProblem) {
    let k = pick(rng, &[3, 5, 7]);
    let long = rng.random_range(0..2);
    for (axis, dim) in p.dims.iter_mut().enumerate() {
        let filter = if axis == long { k } else { 1 };
        *dim = SpatialDim { filter, pad: dim.dilation * (filter / 2), ..*dim };
    }
}

/// Shrinks batch, then spatial sizes, until the problem fits the limits.
fn fit(mut p: ConvProblem, limits: Limits) -> ConvProblem {
    let too_big = |p: &ConvProblem| {
        p.flops() > limits.max_gflop * 1e9
            || [p.input_elements(), p.output_elements(), p.weight_elements()].into_iter().max().unwrap_or(0)
                > limits.max_elements
    };
    while too_big(&p) && p.n > 1 {
        p.n /= 2;
    }
    while too_big(&p) && p.dims.iter().any(|d| d.input > d.filter * d.dilation) {
        for d in &mut p.dims {
            d.input = (d.input / 2).max(d.filter * d.dilation);
        }
    }
    p
}

/// The problem without its direction and data type: what the split is by.
pub fn shape_key(p: &ConvProblem) -> String {
    ConvProblem { direction: Direction::Forward, dtype: DataType::F32, ..p.clone() }.key()
}

/// Whether a shape belongs to the validation share (`percent` of shapes), by a hash of its
/// shape key: fixed, whatever else is in the set.
pub fn is_validation(p: &ConvProblem, percent: u32) -> bool {
    shape_hash(p, "") % 100 < percent
}

/// A number fixed by the shape alone, `salt` making splits independent of one another.
pub fn shape_hash(p: &ConvProblem, salt: &str) -> u32 {
    let hash = blake3::hash(format!("{salt}{}", shape_key(p)).as_bytes());
    u32::from_le_bytes(hash.as_bytes()[..4].try_into().expect("4 bytes"))
}

/// The problem's class, for reports: 1D, 3D, depthwise, grouped, dense 1x1 or dense.
pub fn class_of(p: &ConvProblem) -> &'static str {
    match p.rank() {
        1 => "1D",
        3 => "3D",
        _ if p.is_depthwise() => "depthwise",
        _ if p.g > 1 => "grouped",
        _ if p.dims.iter().all(|d| d.filter == 1) => "dense 1x1",
        _ => "dense",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { min_gflop: 0.0, max_gflop: 8.0, max_elements: 64_000_000 };

    #[test]
    fn the_set_is_seeded_valid_distinct_and_within_limits() {
        let a = synthetic(300, 9, LIMITS, 0);
        assert_eq!(a, synthetic(300, 9, LIMITS, 0), "the same seed draws the same set");
        assert_eq!(a.len(), 300);
        let shapes: std::collections::HashSet<String> = a.iter().map(shape_key).collect();
        assert_eq!(shapes.len(), a.len(), "shapes are distinct");
        assert!(
            a.iter().all(|p| p.validate().is_ok() && (p.flops() <= 8e9 || p.n == 1)),
            "valid, and within the limit unless already at batch 1"
        );
        for class in ["1D", "3D", "depthwise", "grouped", "dense 1x1", "dense"] {
            assert!(a.iter().any(|p| class_of(p) == class), "no {class} problem drawn");
        }
    }

    #[test]
    fn a_floor_redraws_the_small_problems_and_leaves_the_others() {
        let large = Limits { min_gflop: 5.0, max_gflop: 400.0, max_elements: 160_000_000 };
        let a = synthetic(100, 9, large, 0);
        assert_eq!(a.len(), 100);
        assert!(a.iter().all(|p| (5e9..=400e9).contains(&p.flops())), "within the floor and the ceiling");
        let unbounded = synthetic(300, 9, Limits { min_gflop: 0.0, ..large }, 0);
        assert!(unbounded.iter().any(|p| p.flops() < 5e9), "the floor is what removed the small ones");
    }

    #[test]
    fn factorized_filters_are_drawn_only_when_asked() {
        let factorized = |p: &&ConvProblem| p.rank() == 2 && p.dims[0].filter != p.dims[1].filter;
        assert!(!synthetic(300, 9, LIMITS, 0).iter().any(|p| factorized(&p)));
        let drawn = synthetic(300, 9, LIMITS, 50);
        let some: Vec<&ConvProblem> = drawn.iter().filter(factorized).collect();
        assert!(some.len() > 10, "{} factorized of 300", some.len());
        for p in some {
            let (short, long) = if p.dims[0].filter == 1 { (p.dims[0], p.dims[1]) } else { (p.dims[1], p.dims[0]) };
            assert_eq!((short.filter, short.pad), (1, 0), "{}", p.key());
            assert!([3, 5, 7].contains(&long.filter) && long.pad == long.dilation * (long.filter / 2), "{}", p.key());
            assert!(p.validate().is_ok(), "{}", p.key());
        }
    }

    #[test]
    fn the_split_ignores_direction_and_dtype() {
        for p in synthetic(100, 3, LIMITS, 0) {
            let side = is_validation(&p, 20);
            for direction in Direction::ALL {
                for dtype in DataType::ALL {
                    let q = ConvProblem { direction, dtype, ..p.clone() };
                    assert_eq!(is_validation(&q, 20), side, "{}", q.key());
                }
            }
        }
    }
}
