//! Solver configurations ("performance configs") in one generic form: an ordered list of named
//! integer fields. The text form joins `name` + `value` with `_`, e.g. `bm128_bn64_bk32_w4_s3`,
//! so configs are greppable, round-trip exactly, and every field can become a heuristic feature.
//! A name that ends in digits (a cuDNN knob, `k2`) is written `name=value`: `eng22_k2=5_k13=1`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::GconvError;

/// Text form of the config of a solver that has nothing to tune.
pub const DEFAULT_CONFIG_TEXT: &str = "default";

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Config {
    fields: Vec<(String, u32)>,
}

impl Config {
    /// The empty config of a solver that has nothing to tune.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Builds a config from (name, value) pairs; names are lowercase ASCII letters, optionally
    /// followed by digits.
    pub fn new<'a>(fields: impl IntoIterator<Item = (&'a str, u32)>) -> Self {
        let fields: Vec<(String, u32)> = fields.into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        debug_assert!(fields.iter().all(|(n, _)| valid_name(n)), "config field names are [a-z]+[0-9]*");
        Config { fields }
    }

    pub fn fields(&self) -> &[(String, u32)] {
        &self.fields
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<u32> {
        self.fields.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }

    /// Reads the fields `names`, in that order and no others; for a solver's `from_config`.
    pub fn expect_fields<const N: usize>(&self, names: [&str; N]) -> Result<[u32; N], GconvError> {
        let fail = |reason: String| GconvError::BadConfig { text: self.to_string(), reason };
        if self.fields.len() != N || self.fields.iter().zip(names).any(|((n, _), want)| n != want) {
            return Err(fail(format!("expected the fields {} in that order", names.join(", "))));
        }
        let mut out = [0; N];
        for (slot, (_, v)) in out.iter_mut().zip(&self.fields) {
            *slot = *v;
        }
        Ok(out)
    }
}

fn valid_name(name: &str) -> bool {
    let letters = name.bytes().take_while(|b| b.is_ascii_lowercase()).count();
    letters > 0 && name.bytes().skip(letters).all(|b| b.is_ascii_digit())
}

/// Whether the name ends in a digit, so that its value needs an `=` before it.
fn numbered(name: &str) -> bool {
    name.bytes().last().is_some_and(|b| b.is_ascii_digit())
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.fields.is_empty() {
            return f.write_str(DEFAULT_CONFIG_TEXT);
        }
        for (i, (name, value)) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str("_")?;
            }
            if numbered(name) {
                write!(f, "{name}={value}")?;
            } else {
                write!(f, "{name}{value}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for Config {
    type Err = GconvError;

    fn from_str(text: &str) -> Result<Self, GconvError> {
        if text == DEFAULT_CONFIG_TEXT {
            return Ok(Config::empty());
        }
        let fail = |reason: &str| GconvError::BadConfig { text: text.to_string(), reason: reason.to_string() };
        let mut fields = Vec::new();
        for part in text.split('_') {
            let (name, digits) = match part.split_once('=') {
                Some((name, digits)) if valid_name(name) && numbered(name) => (name, digits),
                Some(_) => return Err(fail("only names that end in digits take `=`, as in k2=5")),
                None => {
                    let split = part.find(|c: char| c.is_ascii_digit()).ok_or_else(|| fail("a field has no value"))?;
                    part.split_at(split)
                }
            };
            if !valid_name(name) {
                return Err(fail("field names are lowercase letters, optionally followed by digits"));
            }
            if digits.is_empty()
                || !digits.bytes().all(|b| b.is_ascii_digit())
                || (digits.len() > 1 && digits.starts_with('0'))
            {
                return Err(fail("field values are plain decimal numbers"));
            }
            let value = digits.parse().map_err(|_| fail("a field value is too large"))?;
            if fields.iter().any(|(n, _): &(String, u32)| n == name) {
                return Err(fail("a field appears twice"));
            }
            fields.push((name.to_string(), value));
        }
        Ok(Config { fields })
    }
}
