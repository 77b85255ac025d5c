//! The problem's canonical, versioned text key: what databases store records under.

use super::{ConvProblem, DataType, Direction, Layout, SpatialDim, KEY_VERSION};
use crate::error::{GconvError, Result};

impl ConvProblem {
    /// Canonical, versioned text key, e.g.
    /// `v1:fwd:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1:g32`; `:g<G>` only when G > 1.
    pub fn key(&self) -> String {
        let [input, filter, stride, pad, dilation] = self.spatial_fields();
        let mut key = format!(
            "{KEY_VERSION}:{}:{}:{}:n{}:c{}:k{}:i{input}:f{filter}:s{stride}:p{pad}:d{dilation}",
            self.direction,
            self.dtype,
            self.layout.name(self.rank()),
            self.n,
            self.c,
            self.k,
        );
        if self.g != 1 {
            key.push_str(&format!(":g{}", self.g));
        }
        key
    }

    /// Parses a key made by [`ConvProblem::key`] and validates the problem it names.
    pub fn from_key(key: &str) -> Result<Self> {
        let fail = |reason: String| GconvError::BadKey { key: key.to_string(), reason };
        let fields: Vec<&str> = key.split(':').collect();
        if fields.first() != Some(&KEY_VERSION) {
            return Err(fail(format!("expected it to start with `{KEY_VERSION}:`")));
        }
        if !(12..=13).contains(&fields.len()) {
            return Err(fail(format!("expected 12 or 13 `:`-separated fields, found {}", fields.len())));
        }
        let direction: Direction = fields[1].parse().map_err(fail)?;
        let dtype: DataType = fields[2].parse().map_err(fail)?;
        let (layout, rank) = Layout::parse_name(fields[3]).map_err(fail)?;
        if fields[3] != layout.name(rank) {
            return Err(fail(format!("layout must be written `{}`", layout.name(rank))));
        }
        let scalar = |field: &str, prefix: &str| -> Result<u32> {
            let digits = field
                .strip_prefix(prefix)
                .ok_or_else(|| fail(format!("expected field `{prefix}<number>`, found `{field}`")))?;
            parse_canonical_u32(digits).ok_or_else(|| fail(format!("`{field}` is not `{prefix}` followed by a number")))
        };
        let list = |field: &str, prefix: &str| -> Result<Vec<u32>> {
            let body = field
                .strip_prefix(prefix)
                .ok_or_else(|| fail(format!("expected field `{prefix}<sizes>`, found `{field}`")))?;
            let values = body
                .split('x')
                .map(|v| {
                    parse_canonical_u32(v)
                        .ok_or_else(|| fail(format!("`{field}` is not a list of numbers joined by `x`")))
                })
                .collect::<Result<Vec<u32>>>()?;
            if values.len() != rank {
                return Err(fail(format!(
                    "`{field}` has {} sizes but layout {} has {rank} spatial dimensions",
                    values.len(),
                    fields[3]
                )));
            }
            Ok(values)
        };
        let n = scalar(fields[4], "n")?;
        let c = scalar(fields[5], "c")?;
        let k = scalar(fields[6], "k")?;
        let input = list(fields[7], "i")?;
        let filter = list(fields[8], "f")?;
        let stride = list(fields[9], "s")?;
        let pad = list(fields[10], "p")?;
        let dilation = list(fields[11], "d")?;
        let g = match fields.get(12) {
            None => 1,
            Some(field) => {
                let g = scalar(field, "g")?;
                if g == 1 {
                    return Err(fail("G=1 is written by leaving out the `:g` field".into()));
                }
                g
            }
        };
        let dims = (0..rank)
            .map(|i| SpatialDim {
                input: input[i],
                filter: filter[i],
                stride: stride[i],
                pad: pad[i],
                dilation: dilation[i],
            })
            .collect();
        let problem = ConvProblem { direction, dtype, layout, n, c, k, g, dims };
        problem.validate()?;
        Ok(problem)
    }
}

/// Only the canonical decimal form: no sign, no leading zeros, so keys stay unique.
fn parse_canonical_u32(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}
