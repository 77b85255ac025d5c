//! A problem's engine configs as cuDNN lists them. The full listing (heuristic modes A, B and
//! FALLBACK, then every engine with its default knobs) is what find times. The model's pick
//! needs less: cuDNN's own marks (mode A's pick, the A and FALLBACK list that cuDNN's find
//! times) and whether the configs it was trained on suit the problem. The quick listing asks
//! modes A and FALLBACK alone, then only the default-knob engines a caller asks about, each
//! once; the picks lose at most 0.6% of summed time without mode B on the H200's validation
//! sets (data/models/README.md).

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use cudarc::cudnn::sys::cudnnBackendHeurMode_t as Mode;
use gconv_core::{Config, ConvProblem, DataType};
use serde::{Deserialize, Serialize};

use super::graph::{EngineConfig, OpGraph, Tag};

/// The listing's file format: a listing cached by another format is listed again.
pub(super) const LISTING_FORMAT: &str = "cudnn-listing-1";

/// One usable engine config of a problem.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Candidate {
    pub config: Config,
    /// Read from the engine config before any plan is built.
    pub workspace_bytes: Option<u64>,
    pub compiles_at_run_time: bool,
    /// Named by heuristic mode A or FALLBACK, the lists cuDNN's own find times.
    pub on_find_list: bool,
    /// Which heuristic lists named it, and the engine's numerical and behaviour notes.
    pub notes: String,
}

/// A problem's engine configs, and the lists cuDNN's own heuristic and find would use.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Candidates {
    /// Every usable config listed: heuristics A, B, FALLBACK, then each engine with default
    /// knobs; in a quick listing A and FALLBACK, then the default-knob engines asked about.
    pub all: Vec<Candidate>,
    /// Mode A's first usable config: cuDNN's heuristic pick.
    pub heuristic: Option<Config>,
    /// Modes A and FALLBACK: what PyTorch's benchmark (cuDNN's find) times.
    pub find: Vec<Config>,
    /// Why there is none, when `all` is empty.
    pub none_because: Option<String>,
    /// Heuristics A and FALLBACK and the engines asked about only, not every source (absent
    /// from files written before quick listings, which are full).
    #[serde(default)]
    pub quick: bool,
    /// Default-knob engines a quick listing asked about alone, usable or not.
    #[serde(default)]
    pub engines_asked: Vec<i64>,
    /// Where the listing's time went; nothing where it was read from the disk cache.
    #[serde(skip)]
    pub spent: ListingTime,
    /// Read from the disk cache rather than listed by this process.
    #[serde(skip)]
    pub from_disk: bool,
    /// Each config's place in `all`: selection asks of every config it ranks.
    #[serde(skip)]
    index: std::collections::HashMap<Config, usize>,
}

impl Candidates {
    /// The listed config, if it is one.
    pub fn get(&self, config: &Config) -> Option<&Candidate> {
        self.all.get(*self.index.get(config)?)
    }

    pub(super) fn indexed(mut self) -> Self {
        self.index = self.all.iter().enumerate().map(|(i, c)| (c.config.clone(), i)).collect();
        self
    }

    /// The default-knob engines of `wanted` a quick listing has not asked about; none of a
    /// full listing, which asked every engine.
    pub(super) fn engines_to_ask(&self, wanted: &HashSet<Config>) -> Vec<i64> {
        if !self.quick {
            return Vec::new();
        }
        // Asked on every ranking of the problem: the field count (a default-knob engine is
        // `eng<index>` alone) passes over the knobbed configs, most of `wanted`, unparsed.
        let mut engines: Vec<i64> = wanted
            .iter()
            .filter(|c| c.fields().len() == 1 && self.get(c).is_none())
            .filter_map(|c| Tag::from_config(c).ok().map(|t| t.engine))
            .filter(|e| !self.engines_asked.contains(e))
            .collect();
        engines.sort_unstable();
        engines
    }

    /// Of `wanted`, the configs listed, in listing order.
    pub(super) fn among(&self, wanted: &HashSet<Config>) -> Vec<Config> {
        self.all.iter().filter(|c| wanted.contains(&c.config)).map(|c| c.config.clone()).collect()
    }

    /// [`Self::among`], then the default-knob engines of `wanted` not asked about yet,
    /// unconfirmed: what a ranking may weigh without asking cuDNN more.
    pub(super) fn to_rank(&self, wanted: &HashSet<Config>) -> Vec<Config> {
        let unasked = self.engines_to_ask(wanted).into_iter();
        let mut configs = self.among(wanted);
        configs.extend(unasked.filter_map(|engine| Tag { engine, knobs: vec![] }.to_config().ok()));
        configs
    }

    /// Adds `config` from `source` (or the source to its notes, where listed already); `None`
    /// where exact fp32 cannot use it or it has no tag.
    fn push(&mut self, p: &ConvProblem, config: EngineConfig, source: &str) -> Option<Config> {
        if p.dtype == DataType::F32 && !config.exact_fp32() {
            return None;
        }
        let text = config.tag.to_config().ok()?;
        match self.all.iter_mut().find(|c| c.config == text) {
            Some(known) => known.notes = format!("{source}, {}", known.notes),
            None => self.all.push(Candidate {
                config: text.clone(),
                workspace_bytes: config.workspace_bytes().ok(),
                compiles_at_run_time: config.compiles_at_run_time(),
                on_find_list: false,
                notes: format!("{source}; {}", config.describe_notes()),
            }),
        }
        Some(text)
    }

    fn mark_find_list(&mut self) {
        for candidate in &mut self.all {
            candidate.on_find_list = self.find.contains(&candidate.config);
        }
    }
}

/// What listing a problem's engine configs took: its operation graph (where the listing made
/// it), each heuristic mode (A, B, FALLBACK), and the engines with default knobs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListingTime {
    pub graph: Duration,
    pub heuristics: [Duration; 3],
    pub engines: Duration,
}

/// How much of a listing to ask of cuDNN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Depth {
    /// Heuristic modes A and FALLBACK.
    Quick,
    /// Every mode, then every engine with its default knobs.
    Full,
}

const MODES: [(Mode, &str); 3] = [
    (Mode::CUDNN_HEUR_MODE_A, "heuristic A"),
    (Mode::CUDNN_HEUR_MODE_B, "heuristic B"),
    (Mode::CUDNN_HEUR_MODE_FALLBACK, "fallback"),
];

/// Lists the usable configs of a graph to `depth`. Exact fp32 keeps only exact engines
/// ([`EngineConfig::exact_fp32`]); tf32 and 16-bit types keep every engine.
pub(super) fn list(graph: &OpGraph, p: &ConvProblem, depth: Depth) -> Candidates {
    let mut out = Candidates { quick: depth == Depth::Quick, ..Candidates::default() };
    let mut errors = Vec::new();
    for (i, (mode, source)) in MODES.into_iter().enumerate() {
        if depth == Depth::Quick && mode == Mode::CUDNN_HEUR_MODE_B {
            continue;
        }
        let started = Instant::now();
        let configs = match graph.heuristic(mode) {
            Ok(configs) => configs,
            Err(e) => {
                errors.push(format!("heuristic {mode:?}: {e}"));
                continue;
            }
        };
        for config in configs.into_iter().filter_map(|c| EngineConfig::from_heuristic(c).ok()) {
            if let Some(text) = out.push(p, config, source) {
                if mode == Mode::CUDNN_HEUR_MODE_A && out.heuristic.is_none() {
                    out.heuristic = Some(text.clone());
                }
                if mode != Mode::CUDNN_HEUR_MODE_B && !out.find.contains(&text) {
                    out.find.push(text);
                }
            }
        }
        out.spent.heuristics[i] = started.elapsed();
    }
    if depth == Depth::Full {
        match graph.engine_count() {
            Ok(count) => ask_engines(graph, p, &mut out, 0..count),
            Err(e) => errors.push(format!("engine count: {e}")),
        }
    }
    out.mark_find_list();
    if out.all.is_empty() {
        out.none_because =
            Some(if errors.is_empty() { "no cuDNN engine supports this problem".into() } else { errors.join("; ") });
    }
    out
}

/// Asks cuDNN for each of `engines` with its default knobs, adding those that support the
/// graph to `out` (off the find list: what the find list names is listed already).
pub(super) fn ask_engines(graph: &OpGraph, p: &ConvProblem, out: &mut Candidates, engines: impl Iterator<Item = i64>) {
    let started = Instant::now();
    for engine in engines {
        if let Ok(config) = EngineConfig::from_tag(graph, &Tag { engine, knobs: vec![] }) {
            out.push(p, config, "engine with default knobs");
        }
        if out.quick {
            out.engines_asked.push(engine);
        }
    }
    out.spent.engines += started.elapsed();
    if !out.all.is_empty() {
        out.none_because = None;
    }
}

/// A listing cached on disk, if it is there and reads as one.
pub(super) fn read_listing(path: &Path) -> Option<Candidates> {
    let mut listed: Candidates = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    listed.from_disk = true;
    Some(listed.indexed())
}

/// Caches a listing on disk, whole or not at all; a cache that cannot be written only costs
/// the next process a listing.
pub(super) fn write_listing(path: &Path, listed: &Candidates) {
    if let Ok(bytes) = serde_json::to_vec(listed) {
        crate::compile::store_atomically(path, &bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_survives_the_disk_cache() {
        let dir = std::env::temp_dir().join(format!("gconv-listing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.cudnn-list.json");
        let config: Config = "eng28_k2=3_k3=0".parse().unwrap();
        let listed = Candidates {
            all: vec![Candidate {
                config: config.clone(),
                workspace_bytes: Some(0),
                compiles_at_run_time: false,
                on_find_list: true,
                notes: "heuristic A; no notes".into(),
            }],
            heuristic: Some(config.clone()),
            find: vec![config],
            ..Candidates::default()
        };
        write_listing(&path, &listed);
        let read = read_listing(&path).expect("the listing reads back");
        assert!(read.from_disk);
        assert!(read.get(&listed.all[0].config).is_some_and(|c| c.on_find_list), "indexed as it is read");
        assert_eq!(format!("{:?}", read.all), format!("{:?}", listed.all));
        assert_eq!((read.heuristic, read.find), (listed.heuristic, listed.find));
        std::fs::write(&path, b"{ not a listing").unwrap();
        assert!(read_listing(&path).is_none(), "a damaged file is listed again");
        // A listing cached before quick listings had every source.
        std::fs::write(&path, br#"{"all": [], "heuristic": null, "find": [], "none_because": null}"#).unwrap();
        assert!(read_listing(&path).is_some_and(|l| !l.quick && l.engines_asked.is_empty()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_quick_listing_asks_only_about_wanted_default_knob_engines_it_lacks() {
        let candidate = |text: &str| Candidate {
            config: text.parse().unwrap(),
            workspace_bytes: Some(0),
            compiles_at_run_time: false,
            on_find_list: true,
            notes: "heuristic A; no notes".into(),
        };
        let quick = Candidates {
            all: vec![candidate("eng28_k2=3"), candidate("eng4")],
            quick: true,
            engines_asked: vec![7],
            ..Candidates::default()
        }
        .indexed();
        let wanted: HashSet<Config> =
            ["eng4", "eng7", "eng9", "eng12", "eng28_k2=3", "eng31_k2=1"].iter().map(|t| t.parse().unwrap()).collect();
        // eng4 is listed, eng7 asked already, eng31 has knobs (only heuristics name those).
        assert_eq!(quick.engines_to_ask(&wanted), [9, 12]);
        // A ranking weighs the listed configs it wants, then those engines, unconfirmed.
        let ranked: Vec<String> = quick.to_rank(&wanted).iter().map(Config::to_string).collect();
        assert_eq!(ranked, ["eng28_k2=3", "eng4", "eng9", "eng12"]);
        let full = Candidates { quick: false, ..quick };
        assert!(full.engines_to_ask(&wanted).is_empty(), "a full listing asked every engine");
        assert_eq!(full.to_rank(&wanted).len(), 2, "and ranks only what it lists");
    }
}
