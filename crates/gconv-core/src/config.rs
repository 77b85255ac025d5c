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

/// The values a config field may take.
#[derive(Debug, Clone, Copy)]
pub enum Values {
    /// One of these, listed in the order a search tries them.
    OneOf(&'static [u32]),
    /// Any from the first to the second, both included (the solver bounds it per problem).
    Range(u32, u32),
}

impl Values {
    fn admits(self, value: u32) -> bool {
        match self {
            Values::OneOf(values) => values.contains(&value),
            Values::Range(low, high) => (low..=high).contains(&value),
        }
    }

    fn list(self) -> Vec<u32> {
        match self {
            Values::OneOf(values) => values.to_vec(),
            Values::Range(low, high) => (low..=high).collect(),
        }
    }
}

impl fmt::Display for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Values::OneOf(values) => {
                let listed: Vec<String> = values.iter().map(u32::to_string).collect();
                write!(f, "one of {}", listed.join(", "))
            }
            Values::Range(low, u32::MAX) => write!(f, "at least {low}"),
            Values::Range(low, high) => write!(f, "from {low} to {high}"),
        }
    }
}

/// One field of a solver's config, as its [`Schema`] lists it.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub values: Values,
    /// The value at which the field is left out of the text, if it is: fields added after
    /// configs were stored, so that those configs read as they did.
    pub omitted_at: Option<u32>,
}

impl Field {
    /// A field always written.
    pub const fn new(name: &'static str, values: Values) -> Self {
        Field { name, values, omitted_at: None }
    }

    /// A field written only where it is not `omitted_at`.
    pub const fn unless(name: &'static str, values: Values, omitted_at: u32) -> Self {
        Field { name, values, omitted_at: Some(omitted_at) }
    }
}

/// A solver's config fields, each listed once in text order with the values it may take:
/// parsing, printing and enumerating configs all come from it. Checks that need the problem
/// (shared memory, registers, which directions take a field) stay with the solver.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    pub fields: &'static [Field],
}

impl Schema {
    pub const fn new(fields: &'static [Field]) -> Self {
        Schema { fields }
    }

    /// The values of `config`'s fields in the schema's order (an omitted field at its omitted
    /// value): fails, naming the expected form, when a field is missing, unknown, out of order,
    /// outside its values, or written at the value it is omitted at.
    pub fn parse<const N: usize>(&self, config: &Config) -> Result<[u32; N], GconvError> {
        let fail = |reason: String| GconvError::BadConfig { text: config.to_string(), reason };
        if N != self.fields.len() {
            return Err(fail(format!("a schema of {} fields read into {N} values", self.fields.len())));
        }
        let mut given = config.fields().iter().peekable();
        let mut out = [0; N];
        for (slot, field) in out.iter_mut().zip(self.fields) {
            match given.next_if(|(name, _)| name == field.name) {
                Some(&(_, value)) => {
                    if !field.values.admits(value) {
                        return Err(fail(format!("{} must be {}", field.name, field.values)));
                    }
                    if field.omitted_at == Some(value) {
                        return Err(fail(format!("{} is left out where it is {value}", field.name)));
                    }
                    *slot = value;
                }
                None => match field.omitted_at {
                    Some(value) => *slot = value,
                    None => return Err(fail(format!("expected {}", self.form()))),
                },
            }
        }
        if given.next().is_some() {
            return Err(fail(format!("expected {}", self.form())));
        }
        Ok(out)
    }

    /// The config of these values, in the schema's order; fields at their omitted value left out.
    pub fn print<const N: usize>(&self, values: [u32; N]) -> Config {
        debug_assert_eq!(N, self.fields.len(), "one value per field of the schema");
        let written = self.fields.iter().zip(values).filter(|(field, value)| field.omitted_at != Some(*value));
        Config::new(written.map(|(field, value)| (field.name, value)))
    }

    /// Every combination of the fields' values, the first field varying slowest (a bounded
    /// range gives each of its values; an unbounded one, `at least N`, is the solver's to list).
    pub fn all<const N: usize>(&self) -> impl Iterator<Item = [u32; N]> {
        debug_assert_eq!(N, self.fields.len(), "one value per field of the schema");
        debug_assert!(
            self.fields.iter().all(|f| !matches!(f.values, Values::Range(_, u32::MAX))),
            "an unbounded field has no list"
        );
        let lists: Vec<Vec<u32>> = self.fields.iter().map(|f| f.values.list()).collect();
        let total: usize = lists.iter().map(Vec::len).product();
        (0..total).map(move |mut index| {
            let mut out = [0; N];
            for (slot, list) in out.iter_mut().zip(&lists).rev() {
                *slot = list[index % list.len()];
                index /= list.len();
            }
            out
        })
    }

    /// The expected text form, as in `th<4|8>_rh<1|2|4>_tr<0|1>?` (`?`: left out at its
    /// omitted value), for messages.
    fn form(&self) -> String {
        let field = |f: &Field| {
            let values = match f.values {
                Values::OneOf(values) => values.iter().map(u32::to_string).collect::<Vec<_>>().join("|"),
                Values::Range(low, u32::MAX) => format!("{low}.."),
                Values::Range(low, high) => format!("{low}..{high}"),
            };
            let optional = if f.omitted_at.is_some() { "?" } else { "" };
            format!("{}<{values}>{optional}", f.name)
        };
        self.fields.iter().map(field).collect::<Vec<_>>().join("_")
    }
}
