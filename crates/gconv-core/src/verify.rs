//! Comparing a solver's output with the reference, with a tolerance derived from the data type
//! and the length of the sums rather than one global epsilon.

use serde::Serialize;

use crate::problem::{ConvProblem, DataType};
use crate::tensor::Tensor;

/// Outcome of one comparison. Errors are relative to the largest reference magnitude, so one
/// number describes a whole tensor whatever its scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Verification {
    /// max |got - reference| / max |reference|; infinite when any value is NaN or infinite.
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

pub fn verify(p: &ConvProblem, got: &Tensor, reference: &[f64]) -> Verification {
    let tolerance = tolerance(p);
    let got = got.to_f32();
    assert_eq!(got.len(), reference.len(), "verify: length mismatch");
    let scale = reference.iter().fold(0.0f64, |m, r| m.max(r.abs())).max(f64::MIN_POSITIVE);
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
