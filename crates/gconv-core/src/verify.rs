//! Comparing a solver's output with the reference, with a tolerance derived from the data type
//! and the length of the sums rather than one global epsilon.

use serde::Serialize;

use rayon::prelude::*;

use crate::problem::{ConvProblem, DataType, Direction};
use crate::tensor::{ConvTensors, Tensor};

/// Outcome of one comparison. Errors are relative to the largest reference magnitude (or to
/// the typical size of one output, when that is larger: see [`error_scale_floor`]), so one
/// number describes a whole tensor whatever its scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Verification {
    /// max |got - reference| / max(max |reference|, floor); infinite when any value is NaN or
    /// infinite.
    pub max_error: f64,
    pub tolerance: f64,
    /// Output element with the largest error.
    pub worst_index: usize,
    pub passed: bool,
}

/// Tolerance for a problem computed with fp32 accumulation and stored in `p.dtype`:
/// the output rounding of both sides (2 units of roundoff each, for safety), plus fp32
/// accumulation error, which grows like the square root of the reduction length for
/// random-signed terms (with a factor 8 to cover summation orders such as blocked GEMM).
pub fn tolerance(p: &ConvProblem) -> f64 {
    let accumulation = 8.0 * DataType::F32.unit_roundoff() * (p.reduction_length() as f64).sqrt();
    4.0 * p.dtype.unit_roundoff() + accumulation
}

/// The least scale errors are measured against: the typical size of one output,
/// sqrt(L * mean a^2 * mean b^2) for the direction's inputs a and b and reduction length L.
/// Rounding errors grow with the sizes of the terms, not with their sum; a tiny output of few,
/// cancelling terms (2 outputs of 6 terms each) can have a largest value far below its terms,
/// and an exact-within-rounding result would fail against that alone.
pub fn error_scale_floor(p: &ConvProblem, tensors: &ConvTensors) -> f64 {
    let mean_square = |t: &Tensor| {
        let values = t.to_f32();
        values.par_iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / values.len().max(1) as f64
    };
    let (a, b) = match p.direction {
        Direction::Forward => (&tensors.x, &tensors.w),
        Direction::BackwardData => (&tensors.y, &tensors.w),
        Direction::BackwardWeight => (&tensors.x, &tensors.y),
    };
    (p.reduction_length() as f64 * mean_square(a) * mean_square(b)).sqrt()
}

/// Compares `got` with the reference; `floor` is [`error_scale_floor`] of the inputs.
pub fn verify(p: &ConvProblem, got: &Tensor, reference: &[f64], floor: f64) -> Verification {
    let tolerance = tolerance(p);
    let got = got.to_f32();
    assert_eq!(got.len(), reference.len(), "verify: length mismatch");
    let scale = reference.iter().fold(floor, |m, r| m.max(r.abs())).max(f64::MIN_POSITIVE);
    let mut max_error = 0.0f64;
    let mut worst_index = 0;
    for (i, (&g, &r)) in got.iter().zip(reference).enumerate() {
        let err = if g.is_finite() { (f64::from(g) - r).abs() / scale } else { f64::INFINITY };
        if err > max_error {
            max_error = err;
            worst_index = i;
        }
    }
    Verification { max_error, tolerance, worst_index, passed: max_error <= tolerance }
}
