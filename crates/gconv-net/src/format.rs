//! Where networks come from. Each format is one implementation of [`NetworkFormat`]; [`read`]
//! takes the first of a list that claims what the user named, so a new format is a new
//! implementation and a line in that list, not another branch in a reader.

use std::path::Path;

use crate::{Error, Network, Result};

/// A format networks are read from: the built-in list, network files, ONNX models, driver
/// lines (the CLI's, as its flags are).
pub trait NetworkFormat: Sync {
    /// The format's name in messages.
    fn name(&self) -> &'static str;
    /// Whether `spec` (a built-in network's name or a path) is in this format.
    fn claims(&self, spec: &str) -> bool;
    /// The network `spec` names. `batch` is for formats that bind a batch of their own (ONNX's
    /// symbolic one); [`read`] sets it on every network after.
    fn read(&self, spec: &str, batch: Option<u32>) -> Result<Network>;
}

/// The networks built in from data/nets, by name.
pub struct Builtin;

impl NetworkFormat for Builtin {
    fn name(&self) -> &'static str {
        "a built-in network"
    }

    fn claims(&self, spec: &str) -> bool {
        Network::builtin_names().any(|n| n == spec)
    }

    fn read(&self, spec: &str, _batch: Option<u32>) -> Result<Network> {
        Network::builtin(spec).unwrap_or_else(|| Err(not_claimed(spec, self.name())))
    }
}

/// gconv's network file: one layer per line, each naming the layers that feed it (`<-`).
pub struct NetworkFile;

impl NetworkFormat for NetworkFile {
    fn name(&self) -> &'static str {
        "a network file"
    }

    fn claims(&self, spec: &str) -> bool {
        std::fs::read_to_string(spec)
            .is_ok_and(|text| text.lines().any(|l| l.split('#').next().unwrap_or("").contains("<-")))
    }

    fn read(&self, spec: &str, _batch: Option<u32>) -> Result<Network> {
        let text = std::fs::read_to_string(spec).map_err(|e| Error::BadNetwork {
            origin: spec.to_string(),
            line: 0,
            reason: format!("cannot read it: {e}"),
        })?;
        Network::parse(&stem(spec), &text)
    }
}

/// A network's name from its path: the file's stem.
pub fn stem(spec: &str) -> String {
    Path::new(spec).file_stem().map_or_else(|| spec.to_string(), |s| s.to_string_lossy().into_owned())
}

fn not_claimed(spec: &str, what: &str) -> Error {
    Error::BadNetwork { origin: spec.to_string(), line: 0, reason: format!("is not {what}") }
}

/// The network `spec` names in the first of `formats` that claims it, at batch `batch` when
/// given.
pub fn read(formats: &[&dyn NetworkFormat], spec: &str, batch: Option<u32>) -> Result<Network> {
    let Some(format) = formats.iter().find(|f| f.claims(spec)) else {
        let names: Vec<&str> = formats.iter().map(|f| f.name()).filter(|n| *n != Builtin.name()).collect();
        let builtin: Vec<&str> = Network::builtin_names().collect();
        let reason =
            format!("is neither a built-in network ({}) nor a file read as {}", builtin.join(", "), names.join(", "));
        return Err(Error::BadNetwork { origin: spec.to_string(), line: 0, reason });
    };
    let net = format.read(spec, batch)?;
    Ok(match batch {
        Some(n) => net.with_batch(n),
        None => net,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_format_that_claims_a_spec_reads_it() {
        let net = read(&[&NetworkFile, &Builtin], "squeezenet1_1", Some(4)).unwrap();
        assert_eq!(net.batch(), 4);
        let err = read(&[&Builtin, &NetworkFile], "no-such-net", None).unwrap_err().to_string();
        assert!(
            err.contains("neither a built-in network (resnet50") && err.contains("read as a network file"),
            "{err}"
        );
    }
}
