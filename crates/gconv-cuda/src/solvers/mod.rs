//! One module per solver (and its `.cu` in `kernels/`); `crate::registry` lists them.

pub mod depthwise;
pub mod gemm_blas;
pub mod igemm;
pub mod naive;
