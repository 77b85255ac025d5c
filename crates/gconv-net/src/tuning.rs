//! The tuning JSON: the network (fingerprint, layers, counts), the device, gconv's version,
//! every setting tried with each distinct layer's time per direction, the conversions
//! measured, and the winner with each layer's setting, solver and config. `net run` reuses it
//! with no tuning and no find; `net report` reads it with no device.

use std::collections::BTreeMap;
use std::path::Path;

use gconv_core::{ConvProblem, Format, Layout};
use serde::{Deserialize, Serialize};

use crate::knobs::parse_format;
use crate::network::{Layer, Network, Source};
use crate::{Error, Result};

/// Bumped when a field's meaning changes.
pub const TUNING_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningFile {
    pub format: u32,
    pub gconv_version: String,
    pub device: String,
    pub network: NetworkRecord,
    /// Direction tokens (`fwd`, `bwd-data`, `bwd-weight`).
    pub directions: Vec<String>,
    /// How each layer's time was found: `find`, `tune:<strategy>` or `model`.
    pub method: String,
    /// The format of the network's input and output.
    pub io: String,
    pub settings: Vec<SettingRecord>,
    pub conversions: Vec<ConversionRecord>,
    pub winner: Winner,
    /// Wall time of the tuning, in seconds.
    pub tuning_s: f64,
    /// Where that time went, in seconds by phase.
    #[serde(default)]
    pub phases: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkRecord {
    pub name: String,
    pub fingerprint: String,
    pub batch: u32,
    pub layers: Vec<LayerRecord>,
    pub outputs: Vec<String>,
    /// Distinct shape keys and how many layers have each.
    pub counts: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerRecord {
    pub name: String,
    pub key: String,
    pub inputs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingRecord {
    pub setting: String,
    pub shapes: Vec<ShapeRecord>,
    /// The network's layers in this setting (each shape's time x its count), if all ran.
    pub layers_ms: Option<f64>,
    /// Conversions at the network's input and output.
    pub conversions_ms: f64,
    pub total_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeRecord {
    /// The shape's key (forward, fp32, NCHW), as in `network.counts`.
    pub key: String,
    pub count: usize,
    pub choices: Vec<Choice>,
}

/// One problem's pick and its measured time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    pub direction: String,
    pub problem: String,
    pub solver: Option<String>,
    pub config: Option<String>,
    pub ms: Option<f64>,
    /// max |out - out_fp32| / max |out_fp32| against an fp32 reference on the same data
    /// (before rounding), for settings below fp32.
    pub error: Option<f64>,
    /// Why nothing ran, where nothing did.
    pub failure: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversionRecord {
    /// N x C x spatial.
    pub tensor: String,
    pub from: String,
    pub to: String,
    pub ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Winner {
    /// Chosen layer by layer (`--per-layer`) rather than one setting for the network.
    pub per_layer: bool,
    /// The one setting, where the network has one.
    pub setting: Option<String>,
    pub total_ms: f64,
    pub layers: Vec<LayerChoice>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerChoice {
    pub name: String,
    pub setting: String,
    pub choices: Vec<Choice>,
}

impl NetworkRecord {
    pub fn of(net: &Network) -> Self {
        let name = |s: &Source| match s {
            Source::Input => "input".to_string(),
            Source::Layer(i) => net.layers[*i].name.clone(),
        };
        NetworkRecord {
            name: net.name.clone(),
            fingerprint: net.fingerprint(),
            batch: net.batch(),
            layers: net
                .layers
                .iter()
                .map(|l| LayerRecord {
                    name: l.name.clone(),
                    key: l.shape.key(),
                    inputs: l.inputs.iter().map(name).collect(),
                })
                .collect(),
            outputs: net.outputs.iter().map(|&i| net.layers[i].name.clone()).collect(),
            counts: net.counts(),
        }
    }

    /// The network back, for runs and reports that have only the file.
    pub fn network(&self) -> Result<Network> {
        let bad =
            |reason: String| Error::BadNetwork { origin: format!("{} (tuning file)", self.name), line: 0, reason };
        let mut layers: Vec<Layer> = Vec::new();
        for record in &self.layers {
            let inputs = record
                .inputs
                .iter()
                .map(|s| match s.as_str() {
                    "input" => Ok(Source::Input),
                    _ => layers
                        .iter()
                        .position(|l| &l.name == s)
                        .map(Source::Layer)
                        .ok_or_else(|| bad(format!("`{s}` is not an earlier layer"))),
                })
                .collect::<Result<_>>()?;
            let shape = ConvProblem::from_key(&record.key).map_err(|e| bad(e.to_string()))?;
            layers.push(Layer { name: record.name.clone(), shape, inputs });
        }
        let outputs = self
            .outputs
            .iter()
            .map(|o| {
                layers.iter().position(|l| &l.name == o).ok_or_else(|| bad(format!("output `{o}` is not a layer")))
            })
            .collect::<Result<_>>()?;
        Ok(Network { name: self.name.clone(), layers, outputs })
    }
}

impl TuningFile {
    pub fn read(path: &Path) -> Result<Self> {
        let bad = |reason: String| Error::BadTuning { path: path.display().to_string(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: TuningFile = serde_json::from_str(&text).map_err(|e| bad(format!("not a gconv tuning file: {e}")))?;
        if file.format != TUNING_FORMAT {
            return Err(bad(format!(
                "written in tuning format {}; this gconv reads format {TUNING_FORMAT}",
                file.format
            )));
        }
        if file.winner.layers.iter().any(|l| parse_format(&l.setting).is_none()) {
            return Err(bad("a layer's setting is not DTYPE/LAYOUT".into()));
        }
        Ok(file)
    }

    /// Written whole to a temporary file and renamed, so that an interrupted write leaves the
    /// old file.
    pub fn write(&self, path: &Path) -> Result<()> {
        let bad = |reason: String| Error::BadTuning { path: path.display().to_string(), reason };
        let text = serde_json::to_string_pretty(self).map_err(|e| bad(e.to_string()))?;
        let temporary = path.with_extension("json.partial");
        std::fs::write(&temporary, text + "\n").map_err(|e| bad(e.to_string()))?;
        std::fs::rename(&temporary, path).map_err(|e| bad(e.to_string()))
    }

    pub fn io_format(&self) -> Option<Format> {
        parse_format(&self.io)
    }

    /// Every problem key the file timed, and each one's channels-last twin: what another
    /// library is timed on to compare (`net report --keys`).
    pub fn comparison_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for choice in self.settings.iter().flat_map(|s| &s.shapes).flat_map(|shape| &shape.choices) {
            for key in [Some(choice.problem.clone()), channels_last(&choice.problem)].into_iter().flatten() {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys
    }

    /// Each setting's layers timed by `time` (a problem key's milliseconds): the sum of each
    /// shape's time times its count; `None` where a key has no time.
    pub fn settings_by(&self, time: impl Fn(&str) -> Option<f64>) -> Vec<Option<f64>> {
        let time = &time;
        self.settings
            .iter()
            .map(|s| {
                s.shapes
                    .iter()
                    .flat_map(|shape| shape.choices.iter().map(move |c| Some(time(&c.problem)? * shape.count as f64)))
                    .sum()
            })
            .collect()
    }

    /// The winner's layers (conversions apart), by their own measured times.
    pub fn winner_layers_ms(&self) -> Option<f64> {
        self.winner.layers.iter().flat_map(|l| &l.choices).map(|c| c.ms).sum()
    }

    /// The winner's layers timed by `time` on each layer's problem in channels-last layout and
    /// the dtype the winner chose for it: the same layers as another library would run them.
    pub fn winner_channels_last_by(&self, time: impl Fn(&str) -> Option<f64>) -> Option<f64> {
        self.winner.layers.iter().flat_map(|l| &l.choices).map(|c| time(&channels_last(&c.problem)?)).sum()
    }
}

/// The key with its layout changed to channels-last (NHWC, NDHWC, ...); `None` for a bad key.
fn channels_last(key: &str) -> Option<String> {
    let problem = ConvProblem::from_key(key).ok()?;
    Some(ConvProblem { layout: Layout::Nhwc, ..problem }.key())
}
