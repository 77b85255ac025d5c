//! One module per solver; `crate::registry` lists them.

pub mod depthwise;
pub mod direct_blocked;
pub mod gemm_1x1;
pub mod im2col_gemm;
pub mod reference;

/// Splits `count` items into at most `parts` contiguous ranges of nearly equal size.
pub(crate) fn partition(count: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.clamp(1, count.max(1));
    (0..parts).map(|i| (i * count / parts)..((i + 1) * count / parts)).collect()
}
