//! Features of a (problem, solver, config) candidate on a device: the problem's sizes, its
//! implicit GEMM, the solver (one-hot), every config field as its own feature, and what a tile
//! config implies (padding waste, blocks against the device's units and wave quantisation,
//! split-K, workspace), and for a vendor library's config where the library itself would put
//! it (its heuristic's pick, its own find's list). A model's [`FeatureSpec`] fixes the columns,
//! so the same function makes training rows and selection rows.

use std::collections::HashMap;

use gconv_core::{Config, ConvProblem, DataType, DeviceFacts, Direction, Layout};
use serde::{Deserialize, Serialize};

use crate::measured::{Measured, VendorMarks};

/// Bumped whenever a feature's meaning or order changes: a model of another version is refused.
pub const FEATURE_VERSION: u32 = 2;

/// The problem's columns, in order.
const PROBLEM_FEATURES: [&str; 33] = [
    "n",
    "c_per_group",
    "k_per_group",
    "groups",
    "depthwise",
    "rank",
    "channels_last",
    "dtype",
    "in_d",
    "in_h",
    "in_w",
    "out_d",
    "out_h",
    "out_w",
    "filter_d",
    "filter_h",
    "filter_w",
    "stride_d",
    "stride_h",
    "stride_w",
    "pad_h",
    "pad_w",
    "dilation_h",
    "dilation_w",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "gflop",
    "mbytes",
    "flop_per_byte",
    "reduction",
    "units",
    "clock_mhz",
];
/// What a tile config implies, after the config fields; last, a vendor config's marks.
const TILE_FEATURES: [&str; 11] = [
    "waste_m",
    "waste_n",
    "waste_k",
    "blocks",
    "waves",
    "wave_efficiency",
    "split_k",
    "k_per_split",
    "workspace_mb",
    "vendor_heuristic_pick",
    "vendor_find_list",
];

/// The columns of a model: the problem's, one per solver, one per config field name seen in
/// training, then the tile columns, then, where most of its vendor rows on the library's find
/// list know their place there, that place (`vendor_find_rank`), and last, where it was
/// trained with them, the alignment columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureSpec {
    pub version: u32,
    pub solvers: Vec<String>,
    pub fields: Vec<String>,
    /// Models trained before the rank was recorded have no such column.
    #[serde(default)]
    pub vendor_rank: bool,
    /// The alignment columns ([`ALIGNMENT_FEATURES`]), last; absent from models trained
    /// before them.
    #[serde(default)]
    pub alignment: bool,
}

/// How far the GEMM's sides are aligned, each the largest power of two up to 16 that divides
/// it: channels a group in and out, pixels in and out (a channels-first layout's leading
/// dimension). Tensor-core tiles want 8 or 16 elements; a 17 x 17 layer's 289 pixels ran
/// cuBLAS at half cuDNN's speed in bf16 where the trees, from the sizes alone, saw no cause.
/// Columns of models trained with them (`TrainOptions::alignment`): on the H200 they helped
/// half precision and not fp32, on the CPU not (data/models/README.md).
pub const ALIGNMENT_FEATURES: [&str; 4] = ["align_cg", "align_kg", "align_in_pixels", "align_out_pixels"];

/// The largest power of two up to 16 that divides `x`.
fn alignment(x: f64) -> f64 {
    let x = x as u64;
    (x & x.wrapping_neg()).clamp(1, 16) as f64
}

/// Log of a nominal bound on the problem's time in ms: the larger of its arithmetic and its
/// tensors' bytes at rates good candidates reach on large layers (the H200 sweeps' fastest
/// reach 300-600 TFLOP/s in 16 bits, 40-50 in fp32), plus a launch's floor. A model trained
/// with [`Target::OverBound`](crate::model::Target) learns log time minus this, how far a
/// candidate stays from the bound: that is bounded where log time is not, so a layer larger
/// than any in training is predicted from the largest ones' distance instead of capped at
/// their time, as trees cannot extrapolate (the held-out networks' 3D layers, 20x the largest
/// training problem, were predicted 20x fast). The rates' ratio to one another shapes what
/// the trees see, not their values; on the H200's validation sets these rates cut the picks'
/// summed time more than the peak rates or arithmetic alone (data/models/README.md).
pub fn bound_ln_ms(p: &ConvProblem) -> f64 {
    let flop_per_s = match p.dtype {
        DataType::F32 => 25e12,
        DataType::Tf32 | DataType::F16 | DataType::Bf16 => 400e12,
    };
    const BYTES_PER_S: f64 = 3e12;
    const FLOOR_MS: f64 = 0.005;
    ((p.flops() / flop_per_s).max(p.bytes() / BYTES_PER_S) * 1e3 + FLOOR_MS).ln()
}

/// The per-problem part of a row, computed once and shared by all of a problem's candidates.
#[derive(Debug, Clone)]
pub struct ProblemRow {
    values: [f64; PROBLEM_FEATURES.len()],
    gemm: [f64; 3],
    groups: f64,
    units: f64,
    bound_ln_ms: f64,
    align: [f64; ALIGNMENT_FEATURES.len()],
}

impl ProblemRow {
    pub fn new(p: &ConvProblem, device: DeviceFacts) -> Self {
        let dim = |field: fn(&gconv_core::SpatialDim) -> u32, axis: usize| -> f64 {
            p.dims.len().checked_sub(3 - axis).map_or(1.0, |i| f64::from(field(&p.dims[i])))
        };
        let out = p.output_dims();
        let out_dim = |axis: usize| out.len().checked_sub(3 - axis).map_or(1.0, |i| f64::from(out[i]));
        let taps: f64 = p.dims.iter().map(|d| f64::from(d.filter)).product();
        let in_pixels: f64 = p.dims.iter().map(|d| f64::from(d.input)).product();
        let out_pixels: f64 = out.iter().map(|&o| f64::from(o)).product();
        let (n, cg, kg) = (f64::from(p.n), f64::from(p.c_per_group()), f64::from(p.k_per_group()));
        // The implicit GEMM per group (rows, columns, reduction), as gconv's igemm lays it out.
        let gemm = match p.direction {
            Direction::Forward => [n * out_pixels, kg, cg * taps],
            Direction::BackwardData => [n * in_pixels, cg, kg * taps],
            Direction::BackwardWeight => [kg, cg * taps, n * out_pixels],
        };
        let dtype = match p.dtype {
            DataType::F32 => 0.0,
            DataType::Tf32 => 1.0,
            DataType::F16 => 2.0,
            DataType::Bf16 => 3.0,
        };
        let values = [
            n,
            cg,
            kg,
            f64::from(p.g),
            f64::from(u8::from(p.is_depthwise())),
            p.rank() as f64,
            f64::from(u8::from(p.layout == Layout::Nhwc)),
            dtype,
            dim(|d| d.input, 0),
            dim(|d| d.input, 1),
            dim(|d| d.input, 2),
            out_dim(0),
            out_dim(1),
            out_dim(2),
            dim(|d| d.filter, 0),
            dim(|d| d.filter, 1),
            dim(|d| d.filter, 2),
            dim(|d| d.stride, 0),
            dim(|d| d.stride, 1),
            dim(|d| d.stride, 2),
            dim(|d| d.pad, 1),
            dim(|d| d.pad, 2),
            dim(|d| d.dilation, 1),
            dim(|d| d.dilation, 2),
            gemm[0],
            gemm[1],
            gemm[2],
            p.flops() * 1e-9,
            p.bytes() * 1e-6,
            p.flops() / p.bytes(),
            p.reduction_length() as f64,
            f64::from(device.units),
            f64::from(device.clock_mhz),
        ];
        ProblemRow {
            values,
            gemm,
            groups: f64::from(p.g),
            units: f64::from(device.units.max(1)),
            bound_ln_ms: bound_ln_ms(p),
            align: [cg, kg, in_pixels, out_pixels].map(alignment),
        }
    }
}

impl ProblemRow {
    /// The problem's columns, the first of every row.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// [`bound_ln_ms`] of the problem: what the trees' output is relative to.
    pub fn bound_ln_ms(&self) -> f64 {
        self.bound_ln_ms
    }
}

impl FeatureSpec {
    pub fn new(solvers: Vec<String>, fields: Vec<String>) -> Self {
        FeatureSpec { version: FEATURE_VERSION, solvers, fields, vendor_rank: false, alignment: false }
    }

    /// The spec with the vendor's rank as a column where most of `rows`' configs on the
    /// library's find list have it: selection always knows it, so a column learned from a few
    /// rows among many without it would be read where the trees barely learned it.
    pub fn ranking_where_known(mut self, rows: &[&Measured]) -> Self {
        let on_list = rows.iter().filter(|r| r.vendor.find).count();
        let ranked = rows.iter().filter(|r| r.vendor.find_rank.is_some()).count();
        self.vendor_rank = on_list > 0 && 2 * ranked >= on_list;
        self
    }

    pub fn width(&self) -> usize {
        PROBLEM_FEATURES.len()
            + self.solvers.len()
            + self.fields.len()
            + TILE_FEATURES.len()
            + usize::from(self.vendor_rank)
            + if self.alignment { ALIGNMENT_FEATURES.len() } else { 0 }
    }

    /// Every column's name, for reports and the model file.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = PROBLEM_FEATURES.iter().map(|s| s.to_string()).collect();
        names.extend(self.solvers.iter().map(|s| format!("solver={s}")));
        names.extend(self.fields.iter().map(|f| format!("config.{f}")));
        names.extend(TILE_FEATURES.iter().map(|s| s.to_string()));
        if self.vendor_rank {
            names.push("vendor_find_rank".to_string());
        }
        if self.alignment {
            names.extend(ALIGNMENT_FEATURES.iter().map(|s| s.to_string()));
        }
        names
    }

    /// Appends one candidate's row to `out`. A config field the candidate does not have, and a
    /// tile column of a config without a tile, is NaN (missing, to the trees). `workspace` is
    /// `None` where it is known only once the vendor library plans the config; `vendor`, the
    /// library's marks of its own config (`None` for other solvers: NaN).
    pub fn push_row(
        &self,
        problem: &ProblemRow,
        solver: &str,
        config: &Config,
        workspace: Option<u64>,
        vendor: Option<VendorMarks>,
        out: &mut Vec<f64>,
    ) {
        out.extend_from_slice(&problem.values);
        out.extend(self.solvers.iter().map(|s| f64::from(u8::from(s == solver))));
        // Each of the config's few fields finds its column (in reverse, so that a repeated
        // name reads its first value, as `Config::get` does).
        let fields_at = out.len();
        out.resize(fields_at + self.fields.len(), f64::NAN);
        for (name, value) in config.fields().iter().rev() {
            if let Some(i) = self.fields.iter().position(|f| f == name) {
                out[fields_at + i] = f64::from(*value);
            }
        }
        let field = |name: &str| config.get(name).map(f64::from);
        let [m, n, k] = problem.gemm;
        let mut tile = [f64::NAN; TILE_FEATURES.len()];
        // Configs that name a GEMM tile call its sides bm, bn, bk and the split-K slices ks.
        if let (Some(bm), Some(bn)) = (field("bm"), field("bn")) {
            let splits = field("ks").unwrap_or(1.0);
            let (rows, cols) = ((m / bm).ceil(), (n / bn).ceil());
            let blocks = rows * cols * problem.groups * splits;
            let waves = blocks / problem.units;
            tile[0] = rows * bm / m;
            tile[1] = cols * bn / n;
            tile[2] = field("bk").map_or(f64::NAN, |bk| (k / bk).ceil() * bk / k);
            tile[3] = blocks;
            tile[4] = waves;
            tile[5] = waves / waves.ceil();
            tile[6] = splits;
            tile[7] = k / splits;
        }
        tile[8] = workspace.map_or(f64::NAN, |w| w as f64 * 1e-6);
        if let Some(marks) = vendor {
            (tile[9], tile[10]) = (f64::from(u8::from(marks.heuristic)), f64::from(u8::from(marks.find)));
        }
        out.extend_from_slice(&tile);
        if self.vendor_rank {
            out.push(vendor.and_then(|m| m.find_rank).map_or(f64::NAN, f64::from));
        }
        if self.alignment {
            out.extend_from_slice(&problem.align);
        }
    }
}

/// The feature rows of measured candidates, row after row, and their width. A listed
/// solver's workspace is left out: selection knows it only once the library plans the config;
/// its marks are in.
pub fn rows_of(spec: &FeatureSpec, rows: &[&Measured]) -> (Vec<f64>, usize) {
    let mut problem_rows: HashMap<&ConvProblem, ProblemRow> = HashMap::new();
    let mut out = Vec::with_capacity(rows.len() * spec.width());
    for r in rows {
        let problem = problem_rows.entry(&r.problem).or_insert_with(|| ProblemRow::new(&r.problem, r.facts));
        let (workspace, vendor) = match r.vendor.listed {
            true => (None, Some(r.vendor)),
            false => (Some(r.workspace_bytes), None),
        };
        spec.push_row(problem, &r.solver, &r.config, workspace, vendor, &mut out);
    }
    (out, spec.width())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_columns_say_the_largest_power_of_two_up_to_16_dividing_each_side() {
        assert_eq!([289.0, 48.0, 24.0, 3.0, 64.0].map(alignment), [1.0, 16.0, 8.0, 1.0, 16.0]);
        let p = ConvProblem::from_key("v1:fwd:bf16:NCHW:n32:c768:k192:i17x17:f1x1:s1x1:p0x0:d1x1").unwrap();
        let row = ProblemRow::new(&p, DeviceFacts { units: 132, clock_mhz: 1980 });
        let spec = FeatureSpec { alignment: true, ..FeatureSpec::new(vec!["a".into()], vec![]) };
        let mut out = Vec::new();
        spec.push_row(&row, "a", &Config::empty(), None, None, &mut out);
        assert_eq!(out.len(), spec.width());
        assert_eq!(out[out.len() - 4..], [16.0, 16.0, 1.0, 1.0]);
        assert_eq!(spec.names()[spec.width() - 4], "align_cg");
        assert_eq!(
            FeatureSpec::new(vec![], vec![]).width() + 4,
            FeatureSpec { alignment: true, ..FeatureSpec::new(vec![], vec![]) }.width()
        );
    }

    #[test]
    fn a_row_has_every_column_and_missing_fields_are_nan() {
        let p = ConvProblem::from_key("v1:fwd:f32:NHWC:n8:c64:k128:i28x28:f3x3:s1x1:p1x1:d1x1").unwrap();
        let spec = FeatureSpec::new(vec!["a".into(), "b".into()], vec!["bm".into(), "bn".into(), "eng".into()]);
        let problem = ProblemRow::new(&p, DeviceFacts { units: 132, clock_mhz: 1980 });
        let mut row = Vec::new();
        spec.push_row(&problem, "b", &Config::new([("bm", 128), ("bn", 64)]), Some(0), None, &mut row);
        assert_eq!(row.len(), spec.width());
        assert_eq!(spec.names().len(), spec.width());
        let at = |name: &str| row[spec.names().iter().position(|n| n == name).unwrap()];
        assert_eq!((at("solver=a"), at("solver=b")), (0.0, 1.0));
        assert_eq!(at("gemm_m"), 8.0 * 28.0 * 28.0);
        assert!(at("config.eng").is_nan() && at("waste_k").is_nan());
        // 6272 rows in 49 tiles of 128, 128 columns in 2 of 64: 98 blocks on 132 SMs.
        assert_eq!(at("blocks"), 98.0);
        assert!((at("wave_efficiency") - 98.0 / 132.0).abs() < 1e-12);
        assert!(at("vendor_heuristic_pick").is_nan() && at("vendor_find_list").is_nan(), "not a vendor's config");
        row.clear();
        let marks = VendorMarks { listed: true, heuristic: false, find: true, find_rank: Some(3) };
        spec.push_row(&problem, "a", &Config::empty(), None, Some(marks), &mut row);
        let at = |name: &str| row[spec.names().iter().position(|n| n == name).unwrap()];
        assert_eq!((at("vendor_heuristic_pick"), at("vendor_find_list")), (0.0, 1.0));
        assert!(at("workspace_mb").is_nan());
        assert!(!spec.names().contains(&"vendor_find_rank".to_string()), "no rank column unless trained with it");
        let ranked = FeatureSpec { vendor_rank: true, ..spec.clone() };
        row.clear();
        ranked.push_row(&problem, "a", &Config::empty(), None, Some(marks), &mut row);
        assert_eq!((row.len(), ranked.names().last().map(String::as_str)), (ranked.width(), Some("vendor_find_rank")));
        assert_eq!(row.last(), Some(&3.0));
    }
}
