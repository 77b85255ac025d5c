//! The global knobs a network is tuned over: data types and layouts, each setting one of
//! each for the whole network.

use gconv_core::{DataType, Format, Layout};

use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct Knobs {
    pub dtypes: Vec<DataType>,
    pub layouts: Vec<Layout>,
}

impl Default for Knobs {
    /// fp32 only (a lower precision only where the user allows it), both layouts.
    fn default() -> Self {
        Knobs { dtypes: vec![DataType::F32], layouts: Layout::ALL.to_vec() }
    }
}

impl Knobs {
    /// `dtype=f32,bf16` and `layout=NCHW,NHWC`, each at most once; a knob not given keeps
    /// its default.
    pub fn parse(args: &[String]) -> Result<Knobs> {
        let mut knobs = Knobs::default();
        let mut given = Vec::new();
        for text in args {
            let bad = |reason: String| Error::BadKnob { text: text.clone(), reason };
            let (name, values) =
                text.split_once('=').ok_or_else(|| bad("expected NAME=VALUE,VALUE (dtype or layout)".into()))?;
            if given.contains(&name) {
                return Err(bad(format!("`{name}` is given twice")));
            }
            given.push(name);
            let values: Vec<&str> = values.split(',').map(str::trim).filter(|v| !v.is_empty()).collect();
            if values.is_empty() {
                return Err(bad("no values".into()));
            }
            match name {
                "dtype" => {
                    knobs.dtypes = values
                        .iter()
                        .map(|v| v.parse::<DataType>().map_err(|e| bad(e.to_string())))
                        .collect::<Result<_>>()?
                }
                "layout" => {
                    knobs.layouts = values
                        .iter()
                        .map(|v| layout(v).ok_or_else(|| bad(format!("unknown layout `{v}` (NCHW or NHWC)"))))
                        .collect::<Result<_>>()?
                }
                _ => return Err(bad(format!("unknown knob `{name}` (dtype or layout)"))),
            }
        }
        knobs.dtypes.dedup();
        knobs.layouts.dedup();
        Ok(knobs)
    }

    /// Every combination, data type first.
    pub fn settings(&self) -> Vec<Format> {
        self.dtypes.iter().flat_map(|&dtype| self.layouts.iter().map(move |&layout| Format { dtype, layout })).collect()
    }
}

/// A layout by any of its names (NCHW, NCW, NCDHW; NHWC, NWC, NDHWC).
pub fn layout(name: &str) -> Option<Layout> {
    Layout::ALL.into_iter().find(|l| (1..=3).any(|rank| l.name(rank).eq_ignore_ascii_case(name)))
}

/// A setting as written in reports and the tuning JSON: `bf16/NHWC`.
pub fn parse_format(text: &str) -> Option<Format> {
    let (dtype, layout_name) = text.split_once('/')?;
    Some(Format { dtype: dtype.parse().ok()?, layout: layout(layout_name)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_multiply_into_settings_and_bad_ones_are_named() {
        let knobs = Knobs::parse(&["dtype=f32,bf16".into(), "layout=NHWC".into()]).unwrap();
        let settings: Vec<String> = knobs.settings().iter().map(|f| f.to_string()).collect();
        assert_eq!(settings, ["f32/NHWC", "bf16/NHWC"]);
        assert_eq!(Knobs::parse(&[]).unwrap().settings().len(), 2);
        for bad in ["dtype=f64", "layout=CHWN", "colour=red", "dtype", "dtype="] {
            let e = Knobs::parse(&[bad.to_string()]).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--knobs `{bad}`")), "{e}");
        }
        assert!(Knobs::parse(&["dtype=f32".into(), "dtype=bf16".into()]).is_err());
        assert_eq!(parse_format("bf16/NHWC"), Some(Format { dtype: DataType::Bf16, layout: Layout::Nhwc }));
    }
}
