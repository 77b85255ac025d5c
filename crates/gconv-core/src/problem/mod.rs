//! The convolution problem: what is computed, independent of how. Its text key is in `key`.

mod key;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{GconvError, Result};

/// Largest element count of any one tensor. Kernels index tensors with 32-bit signed integers.
pub const MAX_TENSOR_ELEMENTS: u64 = i32::MAX as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Direction {
    /// y = conv(x, w)
    Forward,
    /// dx = conv_transpose(dy, w)
    BackwardData,
    /// dw = correlate(x, dy)
    BackwardWeight,
}

impl Direction {
    pub const ALL: [Direction; 3] = [Self::Forward, Self::BackwardData, Self::BackwardWeight];

    pub fn token(self) -> &'static str {
        match self {
            Self::Forward => "fwd",
            Self::BackwardData => "bwd-data",
            Self::BackwardWeight => "bwd-weight",
        }
    }

    /// The bit MIOpenDriver's `-F` flag uses for this direction.
    pub fn driver_bit(self) -> u32 {
        match self {
            Self::Forward => 1,
            Self::BackwardData => 2,
            Self::BackwardWeight => 4,
        }
    }
}

/// Storage type of all three tensors. Arithmetic always accumulates in fp32 or wider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DataType {
    F32,
    F16,
    Bf16,
    /// fp32 tensors whose products may be formed from TF32 (10-bit mantissa) inputs on tensor
    /// cores, as cuDNN and PyTorch allow by flag. A problem of its own, so results measured
    /// with TF32 never stand in for exact fp32 ones.
    Tf32,
}

impl DataType {
    pub const ALL: [DataType; 4] = [Self::F32, Self::F16, Self::Bf16, Self::Tf32];

    pub fn token(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Tf32 => "tf32",
        }
    }

    /// The type the tensors are stored in: fp32 for TF32 problems.
    pub fn storage(self) -> DataType {
        match self {
            Self::Tf32 => Self::F32,
            other => other,
        }
    }

    pub fn size_bytes(self) -> usize {
        match self.storage() {
            Self::F16 | Self::Bf16 => 2,
            _ => 4,
        }
    }

    /// Unit roundoff of the values the arithmetic sees: half the distance from 1.0 to the
    /// next value (TF32 inputs keep 10 mantissa bits, like fp16).
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Self::F32 => f64::powi(2.0, -24),
            Self::F16 | Self::Tf32 => f64::powi(2.0, -11),
            Self::Bf16 => f64::powi(2.0, -8),
        }
    }
}

/// Display as the token and parse from it, for enums with `ALL` and `token()`.
macro_rules! token_text {
    ($type:ty, $what:literal, $expected:literal) => {
        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.token())
            }
        }

        impl FromStr for $type {
            type Err = String;
            fn from_str(s: &str) -> std::result::Result<Self, String> {
                Self::ALL
                    .into_iter()
                    .find(|v| v.token() == s)
                    .ok_or_else(|| format!(concat!("unknown ", $what, " `{}` (expected ", $expected, ")"), s))
            }
        }
    };
}

token_text!(Direction, "direction", "fwd, bwd-data or bwd-weight");
token_text!(DataType, "data type", "f32, f16 or bf16");

/// Memory layout family shared by the three tensors of a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Layout {
    /// x and y are N x C x spatial; w is K x C/G x filter.
    Nchw,
    /// x and y are N x spatial x C; w is K x filter x C/G.
    Nhwc,
}

impl Layout {
    pub const ALL: [Layout; 2] = [Self::Nchw, Self::Nhwc];

    /// The conventional name for a given spatial rank, e.g. NCW, NCHW, NCDHW.
    pub fn name(self, rank: usize) -> &'static str {
        match (self, rank) {
            (Self::Nchw, 1) => "NCW",
            (Self::Nchw, 2) => "NCHW",
            (Self::Nchw, _) => "NCDHW",
            (Self::Nhwc, 1) => "NWC",
            (Self::Nhwc, 2) => "NHWC",
            (Self::Nhwc, _) => "NDHWC",
        }
    }

    /// Parses a layout name, case-insensitively, into its family and spatial rank.
    pub fn parse_name(name: &str) -> std::result::Result<(Layout, usize), String> {
        for layout in Self::ALL {
            for rank in 1..=3 {
                if layout.name(rank).eq_ignore_ascii_case(name) {
                    return Ok((layout, rank));
                }
            }
        }
        Err(format!("unknown layout `{name}` (expected one of NCW, NCHW, NCDHW, NWC, NHWC, NDHWC)"))
    }
}

/// One spatial dimension of the problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpatialDim {
    pub input: u32,
    pub filter: u32,
    pub stride: u32,
    pub pad: u32,
    pub dilation: u32,
}

impl SpatialDim {
    pub fn new(input: u32, filter: u32) -> Self {
        Self { input, filter, stride: 1, pad: 0, dilation: 1 }
    }

    /// Output size; zero or negative when the dilated filter does not fit in the padded input.
    pub fn output(&self) -> i64 {
        let span = i64::from(self.dilation) * (i64::from(self.filter) - 1) + 1;
        let padded = i64::from(self.input) + 2 * i64::from(self.pad);
        (padded - span).div_euclid(i64::from(self.stride.max(1))) + 1
    }
}

/// A grouped convolution: direction, sizes, layout and data type. Group g owns input channels
/// [g*C/G, (g+1)*C/G) and output channels [g*K/G, (g+1)*K/G), as in PyTorch and MIOpen.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvProblem {
    pub direction: Direction,
    pub dtype: DataType,
    pub layout: Layout,
    pub n: u32,
    pub c: u32,
    pub k: u32,
    pub g: u32,
    /// Spatial dimensions, outermost first (D, H, W); 1 to 3 of them.
    pub dims: Vec<SpatialDim>,
}

/// The key's version prefix. Bump when the meaning of an existing field changes.
pub const KEY_VERSION: &str = "v1";

impl ConvProblem {
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    pub fn c_per_group(&self) -> u32 {
        self.c / self.g.max(1)
    }

    pub fn k_per_group(&self) -> u32 {
        self.k / self.g.max(1)
    }

    pub fn is_depthwise(&self) -> bool {
        self.g > 1 && self.g == self.c && self.g == self.k
    }

    /// Output spatial sizes. Only meaningful for a validated problem.
    pub fn output_dims(&self) -> Vec<u32> {
        self.dims.iter().map(|d| d.output().max(0) as u32).collect()
    }

    pub fn with_direction(&self, direction: Direction) -> Self {
        Self { direction, ..self.clone() }
    }

    fn product(values: impl IntoIterator<Item = u32>) -> u64 {
        values.into_iter().map(u64::from).product()
    }

    pub fn input_elements(&self) -> u64 {
        u64::from(self.n) * u64::from(self.c) * Self::product(self.dims.iter().map(|d| d.input))
    }

    pub fn weight_elements(&self) -> u64 {
        u64::from(self.k) * u64::from(self.c_per_group()) * Self::product(self.dims.iter().map(|d| d.filter))
    }

    pub fn output_elements(&self) -> u64 {
        u64::from(self.n) * u64::from(self.k) * Self::product(self.output_dims())
    }

    /// Elements of the tensor the given direction writes.
    pub fn result_elements(&self, direction: Direction) -> u64 {
        match direction {
            Direction::Forward => self.output_elements(),
            Direction::BackwardData => self.input_elements(),
            Direction::BackwardWeight => self.weight_elements(),
        }
    }

    /// Multiply-adds times two; the same for all three directions.
    pub fn flops(&self) -> f64 {
        2.0 * self.output_elements() as f64
            * f64::from(self.c_per_group())
            * Self::product(self.dims.iter().map(|d| d.filter)) as f64
    }

    /// Bytes of the three tensors: each read or written once in the ideal case.
    pub fn bytes(&self) -> f64 {
        (self.input_elements() + self.weight_elements() + self.output_elements()) as f64
            * self.dtype.size_bytes() as f64
    }

    /// Length of the sum behind each output element of this problem's direction.
    pub fn reduction_length(&self) -> u64 {
        let filter = Self::product(self.dims.iter().map(|d| d.filter));
        match self.direction {
            Direction::Forward => u64::from(self.c_per_group()) * filter,
            Direction::BackwardData => {
                let stride = Self::product(self.dims.iter().map(|d| d.stride));
                u64::from(self.k_per_group()) * filter.div_ceil(stride)
            }
            Direction::BackwardWeight => u64::from(self.n) * Self::product(self.output_dims()),
        }
    }

    /// Checks everything a solver relies on; the message says what to change.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(GconvError::InvalidProblem(msg));
        if !(1..=3).contains(&self.dims.len()) {
            return bad(format!("spatial rank must be 1, 2 or 3, got {}", self.dims.len()));
        }
        for (name, value) in [("N", self.n), ("C", self.c), ("K", self.k), ("G", self.g)] {
            if value == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if !self.c.is_multiple_of(self.g) {
            return bad(format!("C={} is not divisible by G={}", self.c, self.g));
        }
        if !self.k.is_multiple_of(self.g) {
            return bad(format!("K={} is not divisible by G={}", self.k, self.g));
        }
        let names = dim_names(self.rank());
        for (d, name) in self.dims.iter().zip(names) {
            if d.input == 0 {
                return bad(format!("input size {name} must be at least 1"));
            }
            if d.filter == 0 {
                return bad(format!("filter size along {name} must be at least 1"));
            }
            if d.stride == 0 {
                return bad(format!("stride along {name} must be at least 1"));
            }
            if d.dilation == 0 {
                return bad(format!("dilation along {name} must be at least 1"));
            }
            let out = d.output();
            if out <= 0 {
                return bad(format!(
                    "output size along {name} is {out}: the filter ({} with dilation {}) does not fit \
                     in the input ({} padded by {} on each side)",
                    d.filter, d.dilation, d.input, d.pad
                ));
            }
        }
        for (what, count) in [
            ("input", self.input_elements_checked()),
            ("weight", self.weight_elements_checked()),
            ("output", self.output_elements_checked()),
        ] {
            match count {
                Some(c) if c <= MAX_TENSOR_ELEMENTS => {}
                _ => {
                    return bad(format!(
                        "the {what} tensor has more than {MAX_TENSOR_ELEMENTS} elements, \
                         past what the kernels index"
                    ))
                }
            }
        }
        Ok(())
    }

    fn checked_product(values: impl IntoIterator<Item = u64>) -> Option<u64> {
        values.into_iter().try_fold(1u64, |acc, v| acc.checked_mul(v))
    }

    fn input_elements_checked(&self) -> Option<u64> {
        Self::checked_product([self.n, self.c].into_iter().chain(self.dims.iter().map(|d| d.input)).map(u64::from))
    }

    fn weight_elements_checked(&self) -> Option<u64> {
        Self::checked_product(
            [self.k, self.c_per_group()].into_iter().chain(self.dims.iter().map(|d| d.filter)).map(u64::from),
        )
    }

    fn output_elements_checked(&self) -> Option<u64> {
        Self::checked_product(
            [u64::from(self.n), u64::from(self.k)]
                .into_iter()
                .chain(self.dims.iter().map(|d| d.output().max(0) as u64)),
        )
    }

    /// Human-readable one-liner.
    pub fn summary(&self) -> String {
        let [input, filter, stride, pad, dilation] = self.spatial_fields();
        format!(
            "{} {} {} N={} C={} K={} G={} in={input} filter={filter} stride={stride} pad={pad} dilation={dilation} out={}",
            self.direction,
            self.dtype,
            self.layout.name(self.rank()),
            self.n,
            self.c,
            self.k,
            self.g,
            sizes(self.output_dims()),
        )
    }

    /// Input, filter, stride, padding and dilation sizes, each joined by `x`.
    fn spatial_fields(&self) -> [String; 5] {
        let join = |f: fn(&SpatialDim) -> u32| sizes(self.dims.iter().map(f));
        [join(|d| d.input), join(|d| d.filter), join(|d| d.stride), join(|d| d.pad), join(|d| d.dilation)]
    }
}

/// Sizes joined by `x`, e.g. `28x28`.
fn sizes(values: impl IntoIterator<Item = u32>) -> String {
    values.into_iter().map(|v| v.to_string()).collect::<Vec<_>>().join("x")
}

/// Names of the spatial dimensions for messages, outermost first.
pub fn dim_names(rank: usize) -> &'static [&'static str] {
    match rank {
        1 => &["W"],
        2 => &["H", "W"],
        _ => &["D", "H", "W"],
    }
}
