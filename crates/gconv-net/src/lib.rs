//! gconv-net: networks of convolutions and their autotuning. A network's layers are tuned in
//! every setting of the global knobs (data type, layout) the user allows; the measured layer
//! times plus the measured cost of converting tensors where neighbouring layers differ (and at
//! the network's input and output) give each setting's total, or, per layer, a choice by
//! dynamic programming over the layer graph. The result is a tuning JSON that later runs reuse
//! with no tuning and no find.

pub mod format;
pub mod knobs;
pub mod network;
pub mod plan;
pub mod run;
pub mod tune;
pub mod tuning;

pub use format::NetworkFormat;
pub use knobs::Knobs;
pub use network::{Layer, Network, Source};
pub use tuning::TuningFile;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `line` 0: the file as a whole.
    #[error("network {origin}{}: {reason}", if *line > 0 { format!(", line {line}") } else { String::new() })]
    BadNetwork { origin: String, line: usize, reason: String },
    #[error("--knobs `{text}`: {reason}")]
    BadKnob { text: String, reason: String },
    #[error("tuning file {path}: {reason}")]
    BadTuning { path: String, reason: String },
    #[error(transparent)]
    Tune(#[from] gconv_tune::TuneError),
    #[error(transparent)]
    Core(#[from] gconv_core::GconvError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
