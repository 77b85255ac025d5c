//! Tuning a network: every distinct layer shape in every setting and direction measured on the
//! runtime (by find, tuning or the model's pick, each pick's time measured the same way), the
//! conversions between settings measured, the totals and the winner written as a tuning file.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use gconv_core::{
    Config, ConvProblem, ConvTensors, Conversion, DataType, Direction, Format, Runtime, Solution, Solver,
};
use gconv_tune::db::{Db, GCONV_VERSION};
use gconv_tune::find::{find_among, guided_candidates, measure, FindOptions, TestBed, DATA_SEED};
use gconv_tune::heuristic::Heuristic;
use gconv_tune::measure::median_ms;
use gconv_tune::prebuild::{build_threads, prepare_in_parallel, unbuilt};
use gconv_tune::search::SearchStrategy;
use gconv_tune::select::{select, FindMode, Source};
use gconv_tune::tune::Searched;

use crate::network::{Network, Source as Feeds};
use crate::plan::{Edge, Graph};
use crate::tuning::{
    Choice, ConversionRecord, LayerChoice, NetworkRecord, SettingRecord, ShapeRecord, TuningFile, Winner, TUNING_FORMAT,
};
use crate::Result;

/// How each layer's solution is chosen before it is timed.
pub enum Method<'a> {
    /// Benchmark every candidate (the find-db answers problems found before).
    Find,
    /// Search each tunable solver's configs with the strategy, then find.
    Tune(&'a dyn SearchStrategy),
    /// The model's `top_k` fastest predicted candidates (over every solver, vendor engines
    /// included) measured, the fastest kept; a find where no model covers the problem.
    Model { top_k: usize },
}

impl Method<'_> {
    pub fn label(&self) -> String {
        match self {
            Method::Find => "find".into(),
            Method::Tune(s) => format!("tune:{}", s.describe()),
            Method::Model { top_k } => format!("model(top_k={top_k})"),
        }
    }
}

pub struct NetTuneOptions<'a> {
    pub settings: Vec<Format>,
    pub directions: Vec<Direction>,
    /// The format the network's input arrives in and its output leaves in.
    pub io: Format,
    pub per_layer: bool,
    pub method: Method<'a>,
    pub find: FindOptions,
    pub heuristic: Option<&'a dyn Heuristic>,
    /// Measure each low-precision layer's error against an fp32 reference.
    pub errors: bool,
}

/// Progress, for a bar: `done` of `total` problems measured.
pub struct Progress<'a> {
    pub problem: &'a ConvProblem,
    pub done: usize,
    pub total: usize,
}

/// Conversion times measured so far, by conversion.
#[derive(Default)]
struct Conversions {
    measured: HashMap<Conversion, f64>,
}

impl Conversions {
    fn ms(&mut self, rt: &dyn Runtime, c: Conversion, opts: &FindOptions) -> Result<f64> {
        if c.is_noop() {
            return Ok(0.0);
        }
        if let Some(&ms) = self.measured.get(&c) {
            return Ok(ms);
        }
        let ms = median_ms(rt.conversion_timer(&c, opts.timing)?.as_mut(), opts.samples)?;
        self.measured.insert(c, ms);
        Ok(ms)
    }

    fn records(&self) -> Vec<ConversionRecord> {
        let mut records: Vec<ConversionRecord> = self
            .measured
            .iter()
            .map(|(c, &ms)| ConversionRecord {
                tensor: tensor_text(c),
                from: c.from.to_string(),
                to: c.to.to_string(),
                ms,
            })
            .collect();
        records.sort_by(|a, b| (&a.tensor, &a.from, &a.to).cmp(&(&b.tensor, &b.from, &b.to)));
        records
    }
}

fn tensor_text(c: &Conversion) -> String {
    let spatial: Vec<String> = c.spatial.iter().map(u32::to_string).collect();
    format!("{}x{}x{}", c.n, c.c, spatial.join("x"))
}

/// The activation a layer reads (its input) or writes (its output).
fn tensor(p: &ConvProblem, output: bool, from: Format, to: Format) -> Conversion {
    match output {
        false => Conversion { n: p.n, c: p.c, spatial: p.dims.iter().map(|d| d.input).collect(), from, to },
        true => Conversion { n: p.n, c: p.k, spatial: p.output_dims(), from, to },
    }
}

pub fn tune_network(
    rt: &dyn Runtime,
    db: &mut Db,
    net: &Network,
    opts: &NetTuneOptions<'_>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<TuningFile> {
    let started = Instant::now();
    let problems = problems(net, opts);
    let (choices, phases) = measure_problems(rt, db, &problems, opts, progress)?;
    assemble(rt, net, opts, choices, phases, started)
}

/// Every problem a network tuning measures, in order: settings, then distinct shapes, then
/// directions. Several workers each take a share of them ([`measure_problems`]) and one
/// [`assemble`]s their choices.
pub fn problems(net: &Network, opts: &NetTuneOptions<'_>) -> Vec<ConvProblem> {
    let mut problems = Vec::new();
    for &format in &opts.settings {
        for (shape, _) in net.distinct() {
            for &direction in &opts.directions {
                problems.push(ConvProblem { direction, dtype: format.dtype, layout: format.layout, ..shape.clone() });
            }
        }
    }
    problems
}

/// Each problem's pick by the method, timed, in the order given.
pub fn measure_problems(
    rt: &dyn Runtime,
    db: &mut Db,
    problems: &[ConvProblem],
    opts: &NetTuneOptions<'_>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<(Vec<Choice>, Phases)> {
    let mut phases = Phases::default();
    let guided = guided_candidates_of(rt, db, problems, opts, &mut phases)?;
    let mut picked = Vec::with_capacity(problems.len());
    for (done, (p, candidates)) in problems.iter().zip(&guided).enumerate() {
        progress(Progress { problem: p, done, total: problems.len() });
        picked.push(choose(rt, db, p, opts, candidates.as_deref(), &mut phases)?);
    }
    Ok((picked, phases))
}

/// The tuning file from every problem's choice ([`problems`]' order): the conversions
/// measured on `rt`, each setting's totals, the winner.
pub fn assemble(
    rt: &dyn Runtime,
    net: &Network,
    opts: &NetTuneOptions<'_>,
    choices: Vec<Choice>,
    mut phases: Phases,
    started: Instant,
) -> Result<TuningFile> {
    let distinct = net.distinct();
    if choices.len() != opts.settings.len() * distinct.len() * opts.directions.len() {
        return Err(gconv_core::GconvError::Backend(format!(
            "{} choices for {} problems",
            choices.len(),
            opts.settings.len() * distinct.len() * opts.directions.len()
        ))
        .into());
    }
    // choices[setting][shape][direction]
    let mut picked = choices.into_iter();
    let choices: Vec<Vec<Vec<Choice>>> = opts
        .settings
        .iter()
        .map(|_| distinct.iter().map(|_| picked.by_ref().take(opts.directions.len()).collect()).collect())
        .collect();
    let mut shape_of = vec![0; net.layers.len()];
    for (shape, (_, layers)) in distinct.iter().enumerate() {
        layers.iter().for_each(|&i| shape_of[i] = shape);
    }
    let mut conversions = Conversions::default();
    let converting = Instant::now();
    let graph = graph(rt, net, opts, &choices, &shape_of, &mut conversions)?;
    phases.conversions_s += converting.elapsed().as_secs_f64();
    let settings: Vec<SettingRecord> = opts
        .settings
        .iter()
        .enumerate()
        .map(|(s, format)| {
            let shapes: Vec<ShapeRecord> = distinct
                .iter()
                .zip(&choices[s])
                .map(|((p, layers), c)| ShapeRecord { key: p.key(), count: layers.len(), choices: c.clone() })
                .collect();
            let layers_ms = shapes
                .iter()
                .map(|r| r.choices.iter().map(|c| c.ms).sum::<Option<f64>>().map(|ms| ms * r.count as f64))
                .sum::<Option<f64>>();
            let total_ms = graph.total(&vec![s; net.layers.len()]);
            let conversions_ms = layers_ms.map_or(0.0, |l| (total_ms - l).max(0.0));
            SettingRecord {
                setting: format.to_string(),
                shapes,
                layers_ms,
                conversions_ms,
                total_ms: total_ms.is_finite().then_some(total_ms),
            }
        })
        .collect();
    let (choice, total_ms) = match opts.per_layer {
        true => graph.best_per_node(),
        false => {
            let (s, total) = graph.best_global();
            (vec![s; net.layers.len()], total)
        }
    };
    let layers = net
        .layers
        .iter()
        .enumerate()
        .map(|(i, layer)| LayerChoice {
            name: layer.name.clone(),
            setting: opts.settings[choice[i]].to_string(),
            choices: choices[choice[i]][shape_of[i]].clone(),
        })
        .collect();
    let setting = choice.iter().all(|&s| s == choice[0]).then(|| opts.settings[choice[0]].to_string());
    Ok(TuningFile {
        format: TUNING_FORMAT,
        gconv_version: GCONV_VERSION.to_string(),
        device: rt.device_key().to_string(),
        network: NetworkRecord::of(net),
        directions: opts.directions.iter().map(|d| d.to_string()).collect(),
        method: opts.method.label(),
        io: opts.io.to_string(),
        settings,
        conversions: conversions.records(),
        winner: Winner { per_layer: opts.per_layer, setting, total_ms, layers },
        tuning_s: started.elapsed().as_secs_f64(),
        phases: phases.record(),
    })
}

/// The layer graph's costs: each layer's time in each setting (over the directions), the
/// conversions at the input and output, and between layers where settings differ: forward
/// moves activations from a layer to those it feeds, backward-data moves their gradients back.
fn graph(
    rt: &dyn Runtime,
    net: &Network,
    opts: &NetTuneOptions<'_>,
    choices: &[Vec<Vec<Choice>>],
    shape_of: &[usize],
    conversions: &mut Conversions,
) -> Result<Graph> {
    let settings = &opts.settings;
    let (forward, backward) =
        (opts.directions.contains(&Direction::Forward), opts.directions.contains(&Direction::BackwardData));
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for (i, layer) in net.layers.iter().enumerate() {
        let shape = shape_of[i];
        let mut costs = Vec::new();
        for (s, &format) in settings.iter().enumerate() {
            let mut ms = choices[s][shape].iter().map(|c| c.ms).sum::<Option<f64>>().unwrap_or(f64::INFINITY);
            if layer.inputs.contains(&Feeds::Input) && forward {
                ms += conversions.ms(rt, tensor(&layer.shape, false, opts.io, format), &opts.find)?;
            }
            if net.outputs.contains(&i) {
                if forward {
                    ms += conversions.ms(rt, tensor(&layer.shape, true, format, opts.io), &opts.find)?;
                }
                if backward {
                    ms += conversions.ms(rt, tensor(&layer.shape, true, opts.io, format), &opts.find)?;
                }
            }
            costs.push(ms);
        }
        nodes.push(costs);
        for source in &layer.inputs {
            let Feeds::Layer(from) = *source else { continue };
            let mut cost = vec![vec![0.0; settings.len()]; settings.len()];
            // A global setting never converts between layers; per layer, every pair may.
            if opts.per_layer {
                for (a, &fa) in settings.iter().enumerate() {
                    for (b, &fb) in settings.iter().enumerate() {
                        if forward {
                            cost[a][b] += conversions.ms(rt, tensor(&layer.shape, false, fa, fb), &opts.find)?;
                        }
                        if backward {
                            cost[a][b] += conversions.ms(rt, tensor(&layer.shape, false, fb, fa), &opts.find)?;
                        }
                    }
                }
            }
            edges.push(Edge { from, to: i, cost });
        }
    }
    Ok(Graph { settings: settings.len(), nodes, edges })
}

/// Where the tuning's time went, in seconds (summed over the workers where several tuned).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phases {
    /// Ranking every problem's candidates by the model (and listing the vendor's).
    ranking_s: f64,
    /// Building the own kernels those candidates need, in parallel.
    builds_s: f64,
    /// Tuning, finds and measuring the picks.
    measuring_s: f64,
    /// The fp32 references of the low-precision layers' errors.
    errors_s: f64,
    conversions_s: f64,
}

impl Phases {
    /// Adds another worker's phases.
    pub fn add(&mut self, other: &Phases) {
        self.ranking_s += other.ranking_s;
        self.builds_s += other.builds_s;
        self.measuring_s += other.measuring_s;
        self.errors_s += other.errors_s;
        self.conversions_s += other.conversions_s;
    }

    fn record(&self) -> BTreeMap<String, f64> {
        let phases = [
            ("model ranking", self.ranking_s),
            ("builds", self.builds_s),
            ("measuring", self.measuring_s),
            ("errors", self.errors_s),
            ("conversions", self.conversions_s),
        ];
        phases.into_iter().filter(|(_, s)| *s > 0.0).map(|(name, s)| (name.to_string(), s)).collect()
    }
}

/// Candidates a model-guided find measures.
type Candidates<'r> = Vec<(&'r dyn Solver, Config)>;

/// For the model-guided method, each problem's candidates (`None` where the model gives none),
/// with every own kernel they need built first, all problems' builds in one parallel batch.
fn guided_candidates_of<'r>(
    rt: &'r dyn Runtime,
    db: &Db,
    problems: &[ConvProblem],
    opts: &NetTuneOptions<'_>,
    phases: &mut Phases,
) -> Result<Vec<Option<Candidates<'r>>>> {
    let (Method::Model { top_k }, Some(model)) = (&opts.method, opts.heuristic) else {
        return Ok(vec![None; problems.len()]);
    };
    let started = Instant::now();
    let mut guided = Vec::with_capacity(problems.len());
    for p in problems {
        // A problem with nothing to measure from the model is found instead.
        guided.push(match model.rank(rt, p) {
            Some(ranking) => {
                Some(guided_candidates(rt, db, p, &ranking.candidates, *top_k, &opts.find)?).filter(|c| !c.is_empty())
            }
            None => None,
        });
    }
    phases.ranking_s += started.elapsed().as_secs_f64();
    let building = Instant::now();
    let jobs: Vec<_> = problems
        .iter()
        .zip(&guided)
        .flat_map(|(p, c)| c.iter().flatten().flat_map(move |(s, c)| unbuilt(*s, p, [c.clone()])))
        .collect();
    prepare_in_parallel(&jobs, build_threads());
    phases.builds_s += building.elapsed().as_secs_f64();
    Ok(guided)
}

/// One problem's pick by the method, timed (and its error measured where asked): among the
/// model-guided `candidates` where given, else by tuning and find.
fn choose(
    rt: &dyn Runtime,
    db: &mut Db,
    p: &ConvProblem,
    opts: &NetTuneOptions<'_>,
    candidates: Option<&[(&dyn Solver, Config)]>,
    phases: &mut Phases,
) -> Result<Choice> {
    let mut choice = Choice {
        direction: p.direction.to_string(),
        problem: p.key(),
        solver: None,
        config: None,
        ms: None,
        error: None,
        failure: None,
    };
    let measuring = Instant::now();
    let mut bed = TestBed::new(rt, p);
    let picked = match candidates {
        Some(candidates) => pick_among(rt, &mut bed, p, candidates, &opts.find)?,
        None => pick_by_find(rt, db, &mut bed, p, opts)?,
    };
    phases.measuring_s += measuring.elapsed().as_secs_f64();
    let (solution, ms) = match picked {
        Ok(picked) => picked,
        Err(failure) => {
            choice.failure = Some(failure);
            return Ok(choice);
        }
    };
    choice.solver = Some(solution.solver_id.to_string());
    choice.config = Some(solution.config.to_string());
    choice.ms = ms;
    if opts.errors && p.dtype != DataType::F32 && ms.is_some() {
        let errors = Instant::now();
        choice.error = Some(error_against_fp32(rt, &mut bed, p, &solution)?);
        phases.errors_s += errors.elapsed().as_secs_f64();
    }
    Ok(choice)
}

/// A pick and its time, or why there is none.
type Picked = std::result::Result<(Solution, Option<f64>), String>;

/// The fastest of the model-guided candidates; a failure where none ran.
fn pick_among(
    rt: &dyn Runtime,
    bed: &mut TestBed<'_>,
    p: &ConvProblem,
    candidates: &[(&dyn Solver, Config)],
    find: &FindOptions,
) -> Result<Picked> {
    let rows = find_among(rt, bed, candidates, find)?;
    let Some(best) = rows.iter().find(|r| r.outcome.timed_ms().is_some()) else {
        let reasons: Vec<String> =
            rows.iter().map(|r| format!("{} {}: {}", r.solver, r.config, r.outcome.status())).collect();
        return Ok(Err(format!("none of the model's {} candidates ran ({})", rows.len(), reasons.join("; "))));
    };
    Ok(Ok((rt.build(best.solver, p, best.config.clone())?, best.outcome.timed_ms())))
}

/// The pick of a find (after tuning, for the tune method), its time that find's or measured.
fn pick_by_find(
    rt: &dyn Runtime,
    db: &mut Db,
    bed: &mut TestBed<'_>,
    p: &ConvProblem,
    opts: &NetTuneOptions<'_>,
) -> Result<Picked> {
    if let Method::Tune(strategy) = opts.method {
        gconv_tune::tune::tune(rt, db, p, strategy, Searched::All, &opts.find, &mut |_| {})?;
    }
    let selection = match select(rt, db, bed, p, FindMode::Hybrid, &opts.find, opts.heuristic) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let found = selection
        .find
        .as_ref()
        .filter(|_| selection.source == Source::Find)
        .and_then(|rows| rows.iter().find_map(|r| r.outcome.timed_ms()));
    let ms = match found {
        Some(ms) => Some(ms),
        None => {
            let solver = rt.solver(selection.solution.solver_id)?;
            let (outcome, _) = measure(rt, bed, solver, &selection.solution.config, &opts.find, None, true)?;
            if outcome.timed_ms().is_none() {
                return Ok(Err(outcome.status()));
            }
            outcome.timed_ms()
        }
    };
    Ok(Ok((selection.solution, ms)))
}

/// max |out - out_fp32| / max |out_fp32|: the solution on the problem's data against the
/// runtime's reference (or plain fallback) solver on the same data in fp32 before rounding (the random data of
/// both come from one seed, one drawn in fp32, the other rounded from it).
fn error_against_fp32(
    rt: &dyn Runtime,
    bed: &mut TestBed<'_>,
    p: &ConvProblem,
    solution: &gconv_core::Solution,
) -> Result<f64> {
    let workload = bed.workload(false)?;
    workload.run(solution)?;
    let got = workload.output()?;
    let exact = ConvProblem { dtype: DataType::F32, ..p.clone() };
    // The reference solver where the runtime has one, else its plain fallback (the GPU's naive
    // direct convolution): exact fp32, whatever the tuned solvers do.
    let solvers = rt.solvers();
    let oracle = solvers
        .iter()
        .find(|s| s.is_oracle())
        .or_else(|| solvers.iter().find(|s| s.is_fallback() && s.applicable(&exact).is_ok()))
        .ok_or_else(|| gconv_core::GconvError::Backend(format!("no reference solver runs {}", exact.key())))?;
    let mut reference = rt.upload(&exact, &ConvTensors::try_random(&exact, DATA_SEED)?)?;
    reference.run(&rt.build(oracle.id(), &exact, oracle.default_config(&exact))?)?;
    let want = reference.output()?;
    let (got, want) = (got.to_f32(), want.to_f32());
    let scale = want.iter().fold(0f64, |m, v| m.max(f64::from(v.abs()))).max(f64::MIN_POSITIVE);
    let worst = got.iter().zip(want.iter()).fold(0f64, |m, (g, w)| m.max(f64::from((g - w).abs())));
    Ok(worst / scale)
}
