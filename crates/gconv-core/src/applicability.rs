//! Applicability checks that several solvers share, with the reasons `gconv explain` prints.

use crate::problem::ConvProblem;
use crate::require;
use crate::solver::NotApplicable;

/// A 1x1 filter with unit stride and no padding: the convolution is a plain GEMM.
pub fn plain_1x1(p: &ConvProblem) -> Result<(), NotApplicable> {
    require!(p.dims.iter().all(|d| d.filter == 1), "needs a 1x1 filter");
    require!(p.dims.iter().all(|d| d.stride == 1), "needs stride 1");
    require!(p.dims.iter().all(|d| d.pad == 0), "needs zero padding");
    Ok(())
}

/// One filter per channel: G = C = K.
pub fn depthwise(p: &ConvProblem) -> Result<(), NotApplicable> {
    require!(p.g == p.c && p.g == p.k, "needs G = C = K (depthwise), got G={} C={} K={}", p.g, p.c, p.k);
    Ok(())
}
