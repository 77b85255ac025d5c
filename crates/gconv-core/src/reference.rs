//! The oracle: each direction written straight from its definition, plain loops, fp64 sums.
//! Every solver in the project is checked against these.

use rayon::prelude::*;

use crate::geometry::{positions, Geometry, Strides};
use crate::problem::{ConvProblem, Direction};
use crate::tensor::ConvTensors;

/// The exact (fp64) result of the problem's direction, in the output tensor's layout.
/// The problem must be valid and the tensors must match it.
pub fn reference(p: &ConvProblem, t: &ConvTensors) -> Vec<f64> {
    let geo = Geometry::new(p);
    match p.direction {
        Direction::Forward => forward(&geo, &t.x.to_f32(), &t.w.to_f32()),
        Direction::BackwardData => backward_data(&geo, &t.y.to_f32(), &t.w.to_f32()),
        Direction::BackwardWeight => backward_weight(&geo, &t.x.to_f32(), &t.y.to_f32()),
    }
}

/// Computes `value(outer, channel, pos)` for every element of a tensor with the given strides,
/// in parallel over (outer, channel) pairs.
fn tabulate(
    outer: usize,
    channels: usize,
    extent: [usize; 3],
    strides: Strides,
    value: impl Fn(usize, usize, [usize; 3]) -> f64 + Sync,
) -> Vec<f64> {
    let volume: usize = extent.iter().product();
    let rows: Vec<Vec<f64>> = (0..outer * channels)
        .into_par_iter()
        .map(|oc| positions(extent).map(|pos| value(oc / channels, oc % channels, pos)).collect())
        .collect();
    let mut out = vec![0.0; outer * channels * volume];
    for (oc, row) in rows.into_iter().enumerate() {
        for (pos, v) in positions(extent).zip(row) {
            out[strides.offset(oc / channels, oc % channels, pos)] = v;
        }
    }
    out
}

fn forward(geo: &Geometry, x: &[f32], w: &[f32]) -> Vec<f64> {
    tabulate(geo.n, geo.k(), geo.output, geo.y, |n, k, o| {
        let group = k / geo.kg;
        let mut sum = 0.0f64;
        for c in 0..geo.cg {
            for f in positions(geo.filter) {
                if let Some(i) = geo.input_pos(o, f) {
                    let xv = x[geo.x.offset(n, group * geo.cg + c, i)];
                    let wv = w[geo.w.offset(k, c, f)];
                    sum += f64::from(xv) * f64::from(wv);
                }
            }
        }
        sum
    })
}

fn backward_data(geo: &Geometry, dy: &[f32], w: &[f32]) -> Vec<f64> {
    tabulate(geo.n, geo.c(), geo.input, geo.x, |n, c, i| {
        let group = c / geo.cg;
        let c_local = c % geo.cg;
        let mut sum = 0.0f64;
        for kk in 0..geo.kg {
            let k = group * geo.kg + kk;
            for f in positions(geo.filter) {
                if let Some(o) = geo.output_pos(i, f) {
                    sum += f64::from(dy[geo.y.offset(n, k, o)]) * f64::from(w[geo.w.offset(k, c_local, f)]);
                }
            }
        }
        sum
    })
}

fn backward_weight(geo: &Geometry, x: &[f32], dy: &[f32]) -> Vec<f64> {
    tabulate(geo.k(), geo.cg, geo.filter, geo.w, |k, c_local, f| {
        let c = (k / geo.kg) * geo.cg + c_local;
        let mut sum = 0.0f64;
        for n in 0..geo.n {
            for o in positions(geo.output) {
                if let Some(i) = geo.input_pos(o, f) {
                    sum += f64::from(x[geo.x.offset(n, c, i)]) * f64::from(dy[geo.y.offset(n, k, o)]);
                }
            }
        }
        sum
    })
}
