//! A model: gradient-boosted trees predicting the log of a candidate's time, for one device,
//! direction and data-type family, with its feature spec, the gconv version that trained it and
//! its training manifest. A device's models live together in one folder,
//! `data/models/<device>/<direction>-<family>.json.gz` (gzipped JSON: a model's trees take a
//! quarter of the room); the repository's are embedded in gconv.

use std::collections::BTreeMap;
use std::path::Path;

use gconv_core::{Config, ConvProblem, DataType, DeviceFacts, Direction};
use serde::{Deserialize, Serialize};

use crate::features::{bound_ln_ms, rows_of, FeatureSpec, ProblemRow, FEATURE_VERSION};
use crate::forest::{Forest, Screen};
use crate::measured::{Measured, VendorMarks};
use crate::model_files::GZIPPED;
use crate::problems::class_of;
use crate::train::Manifest;
use crate::{Error, Result};

/// Bumped when the file's layout changes: 2 stores the trees level by level (`Forest`).
pub const MODEL_FORMAT: u32 = 2;

/// Formats this gconv reads: 1's trees, nodes with child links, load as they are.
const READ_FORMATS: [u32; 2] = [1, MODEL_FORMAT];

/// How selection narrows a problem's candidates: every candidate walks the first 30 trees; the
/// 16 they predict fastest and the 2 fastest of each solver walk on to tree 100; of those, the
/// 8 fastest and each solver's 2 fastest walk the rest. Against 60 / 32 and 150 / 16 (the
/// screen before 2026-11-29, when the models were smaller) it ranks a quarter to a third faster
/// and picks as well on the H200's four validation sets, the H100's and the CPU's (within half
/// a point of mean and 1% of summed time, data/models/README.md).
pub const SCREEN: &[Screen] =
    &[Screen { trees: 30, keep: 16, per_group: 2 }, Screen { trees: 100, keep: 8, per_group: 2 }];

/// A candidate's coverage class needs, of training problems, this share of the best-covered
/// class among the problem's candidates and at least [`MIN_COVERAGE`] (or that class's all)
/// before the pick trusts its prediction over better-covered candidates'. With the H200's
/// 600-tree models (2026-11-29) 0.1-0.15 cut the synthetic and large sets' summed time most
/// and take their slowest picks from 7-12x to 3-7x, the held-out sets the same; 0.2 and more
/// guard too much (with the smaller models before, 0.15 let a 79x pick through); with the
/// depth-9 models on the grown sweeps 0.1 beats 0.15 on fp32 (synthetic 1.098x -> 1.085x) and
/// ties elsewhere. The minimum (2 to 6) changes nothing there (data/models/README.md).
pub const COVERAGE_SHARE: f64 = 0.1;
pub const MIN_COVERAGE: usize = 4;

/// How near (a share of the pick's predicted time) a library's own heuristic pick must be
/// predicted for it to take the place of the model's pick among that library's configs. On
/// the validation sets 0.1 cut the picks' summed time on all but one, where it held (H200
/// held-out fp32 1.351x -> 1.261x, bf16 1.281x -> 1.277x, synthetic bf16 1.332x -> 1.324x, H100
/// fp32 1.485x -> 1.402x); 0.2 and 0.3 lost on some (data/models/README.md).
pub const VENDOR_TIE: f64 = 0.1;

/// A candidate's coverage class: its config family (the solver; for a solver whose configs a
/// library lists, the config's engine, its first field) on the problem's layout and class.
pub fn coverage_class(listed: bool, p: &ConvProblem, solver: &str, config: &Config) -> String {
    family_in(listed, solver, config, &layer_class(p))
}

/// The part of a coverage class a problem's candidates share: its layout and class.
fn layer_class(p: &ConvProblem) -> String {
    format!("{} {}", p.layout.name(p.rank()), class_of(p))
}

/// The coverage class of a config family on a problem of `layer` ([`layer_class`]).
fn family_in(listed: bool, solver: &str, config: &Config, layer: &str) -> String {
    match listed {
        true => format!("{solver}:{} {layer}", config.to_string().split('_').next().unwrap_or_default()),
        false => format!("{solver} {layer}"),
    }
}

/// How close a model trained on device key `trained` is to `device`: 3 the same key, 2 the same
/// GPU or CPU by name (another library version), 1 the same kind (backend and GPU
/// architecture or CPU SIMD level, a key's first and third fields), 0 none.
pub fn closeness(trained: &str, device: &str) -> u8 {
    let fields = |key: &str| -> [String; 3] {
        let f: Vec<&str> = key.split(':').collect();
        [0, 1, 2].map(|i| f.get(i).copied().unwrap_or_default().to_string())
    };
    let ([b, n, a], [backend, name, arch]) = (fields(trained), fields(device));
    match () {
        _ if trained == device => 3,
        _ if b == backend && n == name && a == arch => 2,
        _ if b == backend && a == arch => 1,
        _ => 0,
    }
}

/// The distinct solvers of `solvers`, sorted, and each candidate's index among them.
fn solver_groups<'a>(solvers: &[&'a str]) -> (Vec<&'a str>, Vec<u32>) {
    let mut distinct = solvers.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let group = solvers.iter().map(|s| distinct.binary_search(s).expect("one of the solvers") as u32).collect();
    (distinct, group)
}

/// Data types whose times one model predicts: fp32 (exact and TF32) or 16-bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Fp32,
    Half,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::Fp32, Family::Half];

    pub fn of(dtype: DataType) -> Self {
        match dtype {
            DataType::F32 | DataType::Tf32 => Family::Fp32,
            DataType::F16 | DataType::Bf16 => Family::Half,
        }
    }

    pub fn token(self) -> &'static str {
        match self {
            Family::Fp32 => "fp32",
            Family::Half => "half",
        }
    }
}

/// What a model's trees predict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Log time in ms: models trained before the bound (their files have no `target`).
    #[default]
    LogMs,
    /// Log time in ms over the problem's nominal bound ([`bound_ln_ms`]): `gconv train`'s.
    OverBound,
}

impl Target {
    /// What turns the trees' output into log ms on a problem of bound `bound_ln_ms`.
    pub fn offset(self, bound_ln_ms: f64) -> f64 {
        match self {
            Target::LogMs => 0.0,
            Target::OverBound => bound_ln_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub format: u32,
    pub gconv_version: String,
    /// The device key it was trained on.
    pub device: String,
    pub device_facts: DeviceFacts,
    pub direction: Direction,
    pub family: Family,
    pub spec: FeatureSpec,
    /// What the trees predict; files without it predict log time.
    #[serde(default)]
    pub target: Target,
    /// For solvers whose configs a vendor library lists per problem (cuDNN's engine tags): the
    /// configs it listed for several training shapes, the candidates selection ranks without
    /// asking the library.
    pub listed: BTreeMap<String, Vec<String>>,
    /// For gconv's own solvers: the configs measured on several training shapes. Selection
    /// ranks these (those valid for the problem) and the solver's default rather than its whole
    /// space, whose other configs the trees know only by extrapolation and which can run to
    /// thousands.
    #[serde(default)]
    pub trained: BTreeMap<String, Vec<String>>,
    pub manifest: Manifest,
    /// For each coverage class ([`coverage_class`]), the training problems it was timed on:
    /// the pick's guard against extrapolation. Absent from models trained before it (no guard).
    #[serde(default)]
    pub coverage: BTreeMap<String, usize>,
    /// The coverage classes whose result failed verification on a training problem, and on
    /// how many: the pick, which verifies nothing, takes them last.
    #[serde(default)]
    pub wrong: BTreeMap<String, usize>,
    /// Stage two of the pick: every candidate's log time.
    pub forest: Forest,
    /// Stage one: each solver's best log time on a problem (its fastest config's), from the
    /// problem and the solver alone, a smoother target than any one config's. The pick takes
    /// the solvers in this order and each solver's configs in `forest`'s. Absent from models
    /// trained before it (their pick is `forest`'s alone).
    #[serde(default)]
    pub solver_forest: Option<Forest>,
}

impl Model {
    pub fn file_name(&self) -> String {
        format!("{}-{}{GZIPPED}", self.direction, self.family.token())
    }

    pub fn covers(&self, p: &ConvProblem) -> bool {
        self.direction == p.direction && self.family == Family::of(p.dtype)
    }

    pub fn from_json(text: &str, origin: &str) -> Result<Self> {
        let bad = |reason: String| Error::BadModel { origin: origin.to_string(), reason };
        let model: Model = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if !READ_FORMATS.contains(&model.format) || model.spec.version != FEATURE_VERSION {
            return Err(bad(format!(
                "written in model format {} with features v{}; this gconv reads formats {READ_FORMATS:?}, features v{FEATURE_VERSION} (retrain with `gconv train`)",
                model.format, model.spec.version
            )));
        }
        model.forest.check(model.spec.width()).map_err(bad)?;
        if let Some(stage_one) = &model.solver_forest {
            stage_one.check(model.spec.width()).map_err(bad)?;
        }
        Ok(model)
    }

    /// The listed configs of `solver`, parsed.
    pub fn listed_configs(&self, solver: &str) -> Vec<Config> {
        parsed(&self.listed, solver)
    }

    /// The order in which the pick takes candidates whose solvers are `solvers` and whose
    /// predicted log times are `log_ms`: solvers by stage one's prediction of their best time
    /// on `problem`, each solver's candidates by their own prediction.
    pub fn pick_order(&self, problem: &ProblemRow, solvers: &[&str], log_ms: &[f64]) -> Vec<usize> {
        let Some(stage_one) = &self.solver_forest else { return by_time(log_ms) };
        let mut order: Vec<usize> = (0..log_ms.len()).collect();
        let (distinct, group) = solver_groups(solvers);
        let mut rows = Vec::with_capacity(distinct.len() * self.spec.width());
        for solver in &distinct {
            self.spec.push_row(problem, solver, &Config::empty(), None, None, &mut rows);
        }
        let mut best = Vec::new();
        stage_one.predict(&rows, self.spec.width(), &mut best);
        let best_of = |i: usize| best[group[i] as usize];
        order.sort_by(|&a, &b| best_of(a).total_cmp(&best_of(b)).then(log_ms[a].total_cmp(&log_ms[b])));
        order
    }

    /// The candidates of problem `p` (feature rows `rows`; `candidate(i)`, candidate i's solver,
    /// config and vendor marks, `None` for other solvers) as selection and validation rank
    /// them: their predicted log times, screened by the forest's first trees ([`SCREEN`]), and
    /// the order in which the pick takes them ([`Model::pick_order`], then
    /// [`Model::defer_to_vendor`] and [`Model::guard`]).
    pub fn rank<'c>(
        &self,
        p: &ConvProblem,
        problem: &ProblemRow,
        rows: &[f64],
        candidate: impl Fn(usize) -> (&'c str, &'c Config, Option<VendorMarks>),
    ) -> (Vec<f64>, Vec<usize>) {
        let solvers: Vec<&str> = (0..rows.len() / self.spec.width()).map(|i| candidate(i).0).collect();
        let (_, group) = solver_groups(&solvers);
        let mut log_ms = Vec::new();
        self.forest.walked().predict_screened(rows, self.spec.width(), &group, SCREEN, &mut log_ms);
        let offset = self.target.offset(problem.bound_ln_ms());
        log_ms.iter_mut().for_each(|v| *v += offset);
        let mut order = self.pick_order(problem, &solvers, &log_ms);
        self.defer_to_vendor(&log_ms, |i| candidate(i).2, &mut order);
        self.guard(p, |i| (candidate(i).0, candidate(i).1), &mut order);
        (log_ms, order)
    }

    /// Where the first of `order` is a config of a library that lists its own (cuDNN's engine
    /// configs) and the library's heuristic pick is predicted ([`VENDOR_TIE`]) about as fast,
    /// moves that pick first: between a library's own configs its ranking breaks a near tie
    /// better than the trees. Before [`Model::guard`], which may still move it behind.
    /// `marks(i)` is candidate i's vendor marks (`None` for other solvers).
    pub(crate) fn defer_to_vendor(
        &self,
        log_ms: &[f64],
        marks: impl Fn(usize) -> Option<VendorMarks>,
        order: &mut [usize],
    ) {
        let Some(&first) = order.first() else { return };
        if !marks(first).is_some_and(|m| m.listed) {
            return;
        }
        let heuristic = order.iter().position(|&i| marks(i).is_some_and(|m| m.heuristic));
        if let Some(at) = heuristic.filter(|&at| log_ms[order[at]] <= log_ms[first] + VENDOR_TIE.ln_1p()) {
            order[..=at].rotate_right(1);
        }
    }

    /// Reorders `order`, each part keeping its order: first the candidates training covered,
    /// then those whose coverage class it timed on too few problems ([`COVERAGE_SHARE`]: a
    /// prediction there is an extrapolation, and such were the worst picks on unseen layers, a
    /// cuBLAS path seen on 2 NCHW 1x1 shapes 8x slower than cuDNN's engines on others), last
    /// those of a class whose result was wrong on a training problem (cuDNN's fp32 engines 6,
    /// 7 and 17 on 3x3 and 5x5 filters: a pick is not verified, so it must not gamble on one
    /// that can be). `order` holds each candidate's index once; `candidate(i)` is candidate
    /// i's solver and config.
    pub(crate) fn guard<'c>(
        &self,
        p: &ConvProblem,
        candidate: impl Fn(usize) -> (&'c str, &'c Config),
        order: &mut [usize],
    ) {
        if self.coverage.is_empty() && self.wrong.is_empty() {
            return;
        }
        let layer = layer_class(p);
        let classes: Vec<String> = (0..order.len())
            .map(|i| {
                let (solver, config) = candidate(i);
                family_in(self.listed.contains_key(solver), solver, config, &layer)
            })
            .collect();
        let problems: Vec<usize> = classes.iter().map(|c| self.coverage.get(c).copied().unwrap_or(0)).collect();
        let best = problems.iter().copied().max().unwrap_or(0);
        let needed = (COVERAGE_SHARE * best as f64).max(MIN_COVERAGE.min(best) as f64);
        order.sort_by_key(|&i| (self.wrong.contains_key(&classes[i]), (problems[i] as f64) < needed));
    }

    /// Stage two's predicted log times of measured candidates.
    pub fn predict(&self, candidates: &[&Measured]) -> Vec<f64> {
        let (rows, width) = rows_of(&self.spec, candidates);
        let mut log_ms = Vec::new();
        self.forest.predict(&rows, width, &mut log_ms);
        log_ms.iter_mut().zip(candidates).for_each(|(v, c)| *v += self.target.offset(bound_ln_ms(&c.problem)));
        log_ms
    }

    /// The first of `order` that selection by this model can propose (else the first).
    pub fn first_proposed(&self, candidates: &[&Measured], order: &[usize]) -> usize {
        let proposed = |&i: &usize| self.proposes(&candidates[i].solver, &candidates[i].config.to_string());
        order.iter().copied().find(proposed).unwrap_or(order[0])
    }

    /// Whether selection by this model can propose `config` of `solver`: the model's listed
    /// configs of a listed solver, its trained ones of an own solver (selection also ranks the
    /// solver's default for the problem, which is not known here), any config of a solver the
    /// model kept none of.
    pub fn proposes(&self, solver: &str, config: &str) -> bool {
        self.listed
            .get(solver)
            .or_else(|| self.trained.get(solver))
            .is_none_or(|configs| configs.iter().any(|c| c == config))
    }

    /// The configs of own solver `solver` seen in training, parsed; `None` for a model that
    /// kept none (then its whole space is ranked).
    pub fn trained_configs(&self, solver: &str) -> Option<Vec<Config>> {
        self.trained.contains_key(solver).then(|| parsed(&self.trained, solver))
    }
}

/// Candidates' indices, fastest predicted first.
pub fn by_time(log_ms: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..log_ms.len()).collect();
    order.sort_by(|&a, &b| log_ms[a].total_cmp(&log_ms[b]));
    order
}

fn parsed(configs: &BTreeMap<String, Vec<String>>, solver: &str) -> Vec<Config> {
    configs.get(solver).into_iter().flatten().filter_map(|c| c.parse().ok()).collect()
}

/// One device's models, and where they were read from.
#[derive(Debug, Clone)]
pub struct ModelSet {
    pub origin: String,
    pub models: Vec<Model>,
}

impl ModelSet {
    /// The set for a device, model file by model file (direction and dtype family): from the
    /// sets trained on this device key, else on the same GPU or CPU by name (another library
    /// version), else on a device of the same kind (backend and GPU architecture or CPU SIMD
    /// level, the first and third fields of a key); the earlier of equally close sets first.
    /// Features carry the device's own SM count and clock, so a model of another device of
    /// the kind scales to it rather than being refused.
    pub fn for_device(sets: Vec<ModelSet>, device: &str) -> Option<ModelSet> {
        let closeness = |s: &ModelSet| closeness(s.models.first().map_or("", |m| m.device.as_str()), device);
        let mut ranked: Vec<(u8, ModelSet)> =
            sets.into_iter().map(|s| (closeness(&s), s)).filter(|(c, _)| *c > 0).collect();
        ranked.sort_by_key(|(c, _)| std::cmp::Reverse(*c));
        let mut merged: Option<ModelSet> = None;
        for (_, set) in ranked {
            let Some(m) = merged.as_mut() else {
                merged = Some(set);
                continue;
            };
            let lacking: Vec<Model> =
                set.models.into_iter().filter(|x| !m.models.iter().any(|y| y.file_name() == x.file_name())).collect();
            if !lacking.is_empty() {
                let files: Vec<String> = lacking.iter().map(Model::file_name).collect();
                m.origin = format!("{}, and {} from {}", m.origin, files.join(", "), set.origin);
                m.models.extend(lacking);
            }
        }
        merged
    }

    pub fn model(&self, p: &ConvProblem) -> Option<&Model> {
        self.models.iter().find(|m| m.covers(p))
    }

    /// The runtime's solvers (but the oracle) that a model of the set never saw in training
    /// though they apply to one of `problems` it covers, by model: its ranking leaves them
    /// out, so they are never picked without a find.
    pub fn unknown_solvers(
        &self,
        rt: &dyn gconv_core::Runtime,
        problems: &[ConvProblem],
    ) -> Vec<(&Model, Vec<&'static str>)> {
        // A model of another backend (a GPU's, validated on a CPU machine) knows none of this
        // runtime's solvers, and is no use to it either.
        self.models
            .iter()
            .filter(|m| rt.owns_device_key(&m.device))
            .filter_map(|m| {
                let applies =
                    |s: &dyn gconv_core::Solver| problems.iter().any(|p| m.covers(p) && s.applicable(p).is_ok());
                let unknown: Vec<&'static str> = rt
                    .solvers()
                    .into_iter()
                    .filter(|s| !s.is_oracle() && !m.spec.solvers.iter().any(|known| known == s.id()) && applies(*s))
                    .map(|s| s.id())
                    .collect();
                (!unknown.is_empty()).then_some((m, unknown))
            })
            .collect()
    }

    pub fn device(&self) -> &str {
        self.models.first().map_or("", |m| m.device.as_str())
    }

    /// The models of the set trained on `rt`'s device (the same GPU or CPU by name: another
    /// library version counts, [`closeness`] 2 or more), each with the registered solvers it
    /// never saw that apply to one of [`probe_problems`]: a device's own models must know every
    /// solver (a test says so).
    pub fn own_models_unknown(&self, rt: &dyn gconv_core::Runtime) -> Vec<(&Model, Vec<&'static str>)> {
        let ours = |m: &Model| closeness(&m.device, rt.device_key()) >= 2;
        self.unknown_solvers(rt, &probe_problems()).into_iter().filter(|(m, _)| ours(m)).collect()
    }
}

/// Shapes on which every solver of both backends applies in some direction and data type.
const PROBE_SHAPES: [&str; 9] = [
    "NHWC:n3:c8:k12:i5x7:f1x1:s1x1:p0x0:d1x1:g2",
    "NHWC:n3:c16:k24:i5x7:f1x1:s1x1:p0x0:d1x1",
    "NHWC:n2:c16:k16:i11x9:f5x5:s1x2:p2x2:d1x1:g16",
    "NHWC:n2:c32:k32:i9x7:f3x3:s1x1:p1x1:d1x1:g4",
    "NHWC:n2:c16:k32:i9x9:f3x3:s2x2:p1x1:d1x1:g4",
    "NHWC:n2:c64:k64:i9x9:f3x3:s1x1:p1x1:d1x1",
    "NHWC:n2:c128:k128:i8x8:f3x3:s1x1:p1x1:d1x1:g2",
    "NCHW:n2:c6:k6:i9x9:f3x3:s2x2:p1x1:d1x1:g6",
    "NDHWC:n1:c8:k8:i4x6x6:f3x3x3:s1x1x1:p1x1x1:d1x1x1:g8",
];

/// Every probe shape in every direction and data type.
pub fn probe_problems() -> Vec<ConvProblem> {
    let mut out = Vec::new();
    for direction in ["fwd", "bwd-data", "bwd-weight"] {
        for dtype in ["f32", "f16", "bf16"] {
            out.extend(
                PROBE_SHAPES.iter().filter_map(|s| ConvProblem::from_key(&format!("v1:{direction}:{dtype}:{s}")).ok()),
            );
        }
    }
    out
}

/// A device key as a folder name: the GPU or CPU name and architecture, lowercase, dashed.
pub fn device_folder(device: &str) -> String {
    let fields: Vec<&str> = device.split(':').collect();
    let named: String = fields.iter().take(3).copied().collect::<Vec<_>>().join("-");
    let mut out = String::new();
    for c in named.chars() {
        match c.is_ascii_alphanumeric() {
            true => out.push(c.to_ascii_lowercase()),
            false if !out.ends_with('-') => out.push('-'),
            false => {}
        }
    }
    out.trim_matches('-').to_string()
}

/// Where a device's own trained models go by default: the user's cache.
pub fn user_models_dir(device: &str) -> std::path::PathBuf {
    gconv_tune::db::default_cache_dir().join("models").join(device_folder(device))
}

/// The model set selection uses on `rt`: the folder named, else this device's trained models
/// in the user's cache, with the built-in models of this device or its kind for the
/// directions and dtype families they lack.
pub fn models_for(rt: &dyn gconv_core::Runtime, dir: Option<&Path>) -> Result<Option<ModelSet>> {
    if let Some(dir) = dir {
        return Ok(Some(ModelSet::read_dir(dir)?));
    }
    let user = user_models_dir(rt.device_key());
    let mut sets = Vec::new();
    if user.is_dir() {
        sets.push(ModelSet::read_dir(&user)?);
    }
    sets.extend(ModelSet::embedded()?.into_iter().filter(|s| s.models.iter().all(|m| rt.owns_device_key(&m.device))));
    Ok(ModelSet::for_device(sets, rt.device_key()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> ModelSet {
        let sets = ModelSet::embedded().unwrap();
        sets.into_iter().find(|s| s.origin.contains("h100")).expect("the H100 models are built in")
    }

    /// The H100's models as if trained on `device`, only those of `family` ("half", "fp32").
    fn trained_on(device: &str, family: &str) -> ModelSet {
        let mut set = h100();
        set.origin = device.into();
        set.models.retain(|m| m.file_name().ends_with(&format!("-{family}{GZIPPED}")));
        set.models.iter_mut().for_each(|m| m.device = device.into());
        set
    }

    #[test]
    fn a_device_takes_its_own_models_and_its_kinds_for_the_families_it_lacks() {
        let h200 = "cuda:NVIDIA H200:sm_90:sm132:nvrtc13.0:drv13000:cudnn91400";
        let sets = vec![h100(), trained_on(h200, "half")];
        let set = ModelSet::for_device(sets.clone(), h200).unwrap();
        let from = |file: &str| set.models.iter().find(|m| m.file_name() == file).map(|m| m.device.clone());
        assert_eq!(from("fwd-half.json.gz").as_deref(), Some(h200));
        assert!(from("fwd-fp32.json.gz").is_some_and(|d| d.contains("H100")), "{}", set.origin);
        assert_eq!(set.models.len(), 6);

        // Another cuDNN on the same GPU (PyTorch's): still the H200's own models first.
        let other_cudnn = h200.replace("cudnn91400", "cudnn91900");
        let set = ModelSet::for_device(sets.clone(), &other_cudnn).unwrap();
        assert!(set.models.iter().filter(|m| m.file_name().ends_with("-half.json.gz")).all(|m| m.device == h200));

        // Another architecture: nothing.
        assert!(ModelSet::for_device(sets, "cuda:NVIDIA B200:sm_100:sm148").is_none());
    }
}
