//! One module per solver (and its `.cu` in `kernels/`); `crate::registry` lists them.

pub mod depthwise;
mod direct;
pub mod gemm_blas;
pub mod grouped_direct;
pub mod igemm;
pub mod naive;
