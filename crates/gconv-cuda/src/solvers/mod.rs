//! One module per solver (and its `.cu` in `kernels/`); `crate::runtime` lists them.

pub mod cudnn;
pub mod depthwise;
mod direct;
pub mod gemm_blas;
pub mod grouped_direct;
pub mod igemm;
pub mod naive;
