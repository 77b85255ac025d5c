//! `gconv sweep`: every applicable solver x every config x every problem into one CSV, the
//! learned heuristic's training data. Candidates run in worker processes (this binary with
//! `sweep --worker`), one per device, so a kernel that faults or hangs costs only its own row:
//! the worker is stopped, the row recorded as failed, and a new worker goes on with the rest.
//! Rows already in the CSV for this device are skipped, so a stopped sweep resumes. While the
//! workers measure, this process lists the candidates of the next few problems and builds
//! their kernels; `--time-limit-s` stops handing out problems, so a time-boxed slice ends with its
//! summary.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use gconv_core::{Config, ConvProblem, Runtime, Solver, SolverKind};
use gconv_heuristic::measured::VendorMarks;
use gconv_tune::find::FindOptions;
use gconv_tune::prebuild::{build_threads, prepare_in_parallel, unbuilt, BuildJob};
use gconv_tune::sweep::{candidates, sweep_problem, SweepEvent};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use self::csv_file::measured_rows;
pub use self::csv_file::{CsvSink, Row, RowReply};
use self::queue::{Candidates, Queue};

mod csv_file;
mod queue;

/// Building a problem's kernels ahead may take this many times the per-candidate timeout.
const BUILD_TIMEOUT_FACTOR: u32 = 10;

pub struct SweepOptions {
    pub out: PathBuf,
    pub find: FindOptions,
    /// Longest wait for one candidate's result before its worker is stopped.
    pub timeout: Duration,
    /// CUDA_VISIBLE_DEVICES of each worker; empty: one worker per device this process sees.
    pub devices: Vec<String>,
    /// Sample each solver's own config space down to this many (and its default).
    pub configs_per_solver: Option<usize>,
    /// Solver ids whose rows already in the CSV are measured again.
    pub remeasure: Vec<String>,
    /// Hand out no problem after this long; the ones being measured finish.
    pub time_limit: Option<Duration>,
    /// The global flags a worker is started with (backend, timing).
    pub worker_flags: Vec<String>,
    pub progress: bool,
}

/// What the sweep sends a worker: one problem and the candidates to measure on it.
#[derive(Serialize, Deserialize)]
struct Batch {
    problem: String,
    items: Vec<(String, String)>,
}

/// What a worker answers, one JSON line each: that the batch's kernels are built, then one
/// row per candidate, in order.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Reply {
    Built { built: bool },
    Row { item: usize, status: String, ms: Option<f64>, workspace_bytes: u64 },
}

/// One problem's candidates still to measure, by solver id and config text, with their
/// vendor marks.
struct Pending {
    idx: usize,
    problem: ConvProblem,
    items: Candidates,
    vendor: Vec<VendorMarks>,
}

pub fn sweep(
    rt: &dyn Runtime,
    device_line: &str,
    problems: &[ConvProblem],
    opts: &SweepOptions,
) -> anyhow::Result<ExitCode> {
    let device = rt.device_key();
    let mut done = measured_rows(&opts.out, device)?;
    let rows = done.len();
    done.retain(|(_, solver, _)| !opts.remeasure.contains(solver));
    println!("device:    {device_line}");
    println!(
        "sweep:     {} problems, {} rows already in {}{}{}",
        problems.len(),
        rows,
        opts.out.display(),
        match rows - done.len() {
            0 => String::new(),
            again => format!(" ({again} of {} to measure again)", opts.remeasure.join(", ")),
        },
        opts.time_limit.map(|t| format!("; time limit {} s", t.as_secs())).unwrap_or_default()
    );
    let csv = Mutex::new(CsvSink::open(&opts.out)?);
    let bar = ProgressBar::new(0);
    match opts.progress {
        true => bar.set_style(
            ProgressStyle::with_template("[{bar:30}] {pos}/{len} candidates listed so far, {elapsed} spent")
                .expect("valid template")
                .progress_chars("=> "),
        ),
        false => bar.set_draw_target(indicatif::ProgressDrawTarget::hidden()),
    }
    let seen = rt.worker_devices();
    let named = match opts.devices.is_empty() {
        true => &seen,
        false => &opts.devices,
    };
    let devices: Vec<Option<&str>> = match named.is_empty() {
        true => vec![None],
        false => named.iter().map(|d| Some(d.as_str())).collect(),
    };
    if devices.len() > 1 {
        println!("workers:   one per device, CUDA_VISIBLE_DEVICES {}", named.join(" / "));
    }
    let facts = rt.facts();
    let sink = |p: &Pending, i: usize, reply: RowReply| -> anyhow::Result<()> {
        let (solver, config) = &p.items[i];
        let row = Row { problem_idx: p.idx, problem: &p.problem, solver, config, device, facts, vendor: p.vendor[i] };
        csv.lock().unwrap().write(&row, &reply)?;
        bar.inc(1);
        Ok(())
    };
    let started = Instant::now();
    let queue = Queue::new(opts.time_limit.map(|t| started + t), LISTED_AHEAD * devices.len());
    let (listed, spent) = std::thread::scope(|scope| {
        let lister = scope.spawn(|| list(rt, problems, opts.configs_per_solver, &done, &queue, &bar));
        let builder = scope.spawn(|| build_ahead(rt, &queue));
        let workers: Vec<_> = devices
            .iter()
            .map(|d| scope.spawn(|| drive_worker(opts.timeout, &|| Worker::start(opts, *d), &queue, &sink)))
            .collect();
        let spent: anyhow::Result<Spent> =
            workers.into_iter().map(|w| w.join().expect("a worker thread panicked")).sum();
        queue.close();
        builder.join().expect("the kernel builder panicked");
        (lister.join().expect("the lister panicked"), spent)
    });
    let spent = spent?;
    bar.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    let measured = csv.into_inner().unwrap().counts;
    let total: usize = measured.iter().sum();
    println!(
        "time:      {wall:.0} s, {:.2} candidates a second per worker; listing took {:.0} s, the workers built kernels {:.0} s and measured {:.0} s",
        total as f64 / wall / devices.len() as f64,
        listed.time.as_secs_f64(),
        spent.building.as_secs_f64(),
        spent.measuring.as_secs_f64()
    );
    println!(
        "measured:  {} ok, {} stopped early, {} failed or wrong, {} not run; rows in {}",
        measured[0],
        measured[3],
        measured[1],
        measured[2],
        opts.out.display()
    );
    if queue.past_deadline() {
        println!(
            "stopped:   at the time limit, {} problems listed and not measured, {} not listed",
            queue.left(),
            problems.len() - listed.problems
        );
    }
    Ok(if measured[1] == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// How far the listing went: problems looked at, and the time it took.
struct Listed {
    problems: usize,
    time: Duration,
}

/// Problems a worker may have listed ahead of it: enough for the kernel builder to build the
/// next ones while it measures, few enough that a sweep cut by its time limit does not list
/// thousands it never measures (listing all ran up to 3,000 problems ahead of an H200 slice).
const LISTED_AHEAD: usize = 16;

/// Lists each problem's candidates not yet in the CSV into the queue, in the problems' order,
/// until all are listed, the time is up or no worker takes more.
fn list(
    rt: &dyn Runtime,
    problems: &[ConvProblem],
    per_solver: Option<usize>,
    done: &HashSet<(String, String, String)>,
    queue: &Queue,
    bar: &ProgressBar,
) -> Listed {
    /// Ends the listing however `list` returns, so that no worker waits for more.
    struct Finish<'q>(&'q Queue);
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            self.0.finish_listing();
        }
    }
    let _finish = Finish(queue);
    let started = Instant::now();
    // A vendor library's rows of a problem come all at once (a problem handed out is measured
    // to the end): where there are some, listing the library again (tens of ms for cuDNN)
    // would add nothing.
    let vendor_swept: HashSet<(&str, &str)> =
        done.iter().map(|(key, solver, _)| (key.as_str(), solver.as_str())).collect();
    let mut looked = 0;
    for (idx, p) in problems.iter().enumerate() {
        if queue.done_taking() {
            break;
        }
        looked += 1;
        let key = p.key();
        let wanted = |s: &dyn Solver| !(s.find_times_every_config() && vendor_swept.contains(&(key.as_str(), s.id())));
        let all = candidates(rt, p, per_solver, &wanted);
        // A library that cannot list the problem has no picks to mark; its rows say why.
        let vendor = all.iter().any(|(s, _)| s.find_times_every_config());
        let yardstick = if vendor { rt.yardstick(p).ok().flatten() } else { None };
        let (items, vendor): (Vec<_>, Vec<_>) = all
            .iter()
            .map(|(s, c)| ((s.id().to_string(), c.to_string()), VendorMarks::of(*s, c, yardstick.as_ref())))
            .filter(|((s, c), _)| !done.contains(&(key.clone(), s.clone(), c.clone())))
            .unzip();
        if !items.is_empty() {
            bar.inc_length(items.len() as u64);
            if !queue.push(Pending { idx, problem: p.clone(), items, vendor }) {
                // Dropped at the time limit: counted with those not listed.
                looked -= 1;
                break;
            }
        }
    }
    Listed { problems: looked, time: started.elapsed() }
}

/// Builds the kernels of gconv's own solvers for the problems next in the queue while the
/// workers measure, into the disk cache where a worker then finds them: the workers' GPUs
/// otherwise idle while their next problem builds. (A vendor library's builds, cuDNN's plans,
/// live in the process that makes them: the worker's.) Ends when every problem still queued
/// is built or, after the problem it is building, once the workers are done (failures are
/// left for the worker, which reports them in its rows).
fn build_ahead(rt: &dyn Runtime, queue: &Queue) {
    let mut built = HashSet::new();
    while let Some((idx, problem, items)) = queue.next_unbuilt(&built) {
        built.insert(idx);
        let jobs: Vec<BuildJob<'_>> = items
            .iter()
            .filter_map(|(solver, config)| Some((rt.solver(solver).ok()?, config.parse::<Config>().ok()?)))
            .filter(|(solver, _)| solver.kind() == SolverKind::Own)
            .flat_map(|(solver, config)| unbuilt(solver, &problem, [config]))
            .collect();
        prepare_in_parallel(&jobs, build_threads());
    }
}

/// Where a worker's time went: building a problem's kernels (from a batch sent to the worker
/// saying it built them), then measuring its candidates.
#[derive(Debug, Default)]
struct Spent {
    building: Duration,
    measuring: Duration,
}

impl std::iter::Sum for Spent {
    fn sum<I: Iterator<Item = Spent>>(all: I) -> Spent {
        all.fold(Spent::default(), |a, b| Spent {
            building: a.building + b.building,
            measuring: a.measuring + b.measuring,
        })
    }
}

/// Hands the queue's problems to a worker process on `device`, one at a time, starting a new
/// worker whenever one stops answering or exits.
fn drive_worker(
    timeout: Duration,
    start: &dyn Fn() -> anyhow::Result<Worker>,
    queue: &Queue,
    sink: &(dyn Fn(&Pending, usize, RowReply) -> anyhow::Result<()> + Sync),
) -> anyhow::Result<Spent> {
    let mut spent = Spent::default();
    let mut worker: Option<Worker> = None;
    while let Some(pending) = queue.take() {
        let mut left: Vec<usize> = (0..pending.items.len()).collect();
        while !left.is_empty() {
            let w = match worker.as_mut() {
                Some(w) => w,
                None => worker.insert(start()?),
            };
            let batch = Batch {
                problem: pending.problem.key(),
                items: left.iter().map(|&i| pending.items[i].clone()).collect(),
            };
            w.send(&batch)?;
            let mut since = Instant::now();
            let mut answered = HashSet::new();
            let mut built = false;
            let stopped = loop {
                if answered.len() == left.len() {
                    break None;
                }
                let wait = if built { timeout } else { timeout * BUILD_TIMEOUT_FACTOR };
                match w.next(wait) {
                    Ok(Reply::Built { .. }) => {
                        built = true;
                        spent.building += since.elapsed();
                        since = Instant::now();
                    }
                    Ok(Reply::Row { item, status, ms, workspace_bytes }) => {
                        let i = *left.get(item).context("a worker answered a candidate it was not given")?;
                        sink(&pending, i, RowReply { status, ms, workspace_bytes })?;
                        answered.insert(item);
                    }
                    Err(reason) => break Some(reason),
                }
            };
            match built {
                true => spent.measuring += since.elapsed(),
                false => spent.building += since.elapsed(),
            }
            let Some(reason) = stopped else { break };
            // The first unanswered candidate was running: it gets the failure, the rest go to
            // a new worker.
            worker.take().expect("a worker ran").stop();
            let first = (0..left.len()).find(|i| !answered.contains(i)).expect("a candidate was unanswered");
            let what = if built { "" } else { " while building the problem's kernels" };
            sink(
                &pending,
                left[first],
                RowReply { status: format!("failed: {reason}{what}"), ms: None, workspace_bytes: 0 },
            )?;
            left = (0..left.len()).filter(|i| *i > first && !answered.contains(i)).map(|i| left[i]).collect();
        }
    }
    if let Some(w) = worker {
        w.finish(timeout);
    }
    Ok(spent)
}

/// A worker process and the lines it prints, read by a thread of their own so that waiting for
/// one can time out.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Worker {
    /// This binary as a worker on `device`.
    fn start(opts: &SweepOptions, device: Option<&str>) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find the gconv binary to start a sweep worker")?;
        let mut command = Command::new(exe);
        command.args(&opts.worker_flags).args(["sweep", "--worker"]);
        command.args([
            "--find-iter",
            &opts.find.samples.to_string(),
            "--workspace-limit-mib",
            &(opts.find.workspace_limit >> 20).to_string(),
        ]);
        if opts.find.time_box {
            command.arg("--early-stop");
        }
        if let Some(device) = device {
            command.env("CUDA_VISIBLE_DEVICES", device);
        }
        Self::spawn(command)
    }

    fn spawn(mut command: Command) -> anyhow::Result<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start a sweep worker")?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Worker { child, stdin, lines })
    }

    fn send(&mut self, batch: &Batch) -> anyhow::Result<()> {
        let line = serde_json::to_string(batch)?;
        writeln!(self.stdin, "{line}").and_then(|_| self.stdin.flush()).context("a sweep worker stopped reading")
    }

    /// The next reply, or why none came.
    fn next(&mut self, wait: Duration) -> Result<Reply, String> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => serde_json::from_str(&line).map_err(|e| format!("the worker printed `{line}`: {e}")),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("no result within {} s, the worker was stopped", wait.as_secs()))
            }
            Err(RecvTimeoutError::Disconnected) => match self.child.wait() {
                Ok(status) => Err(format!("the worker exited ({status})")),
                Err(e) => Err(format!("the worker was lost: {e}")),
            },
        }
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes the worker's input, which ends it, and waits for it as long as for a candidate
    /// before stopping it.
    fn finish(mut self, wait: Duration) {
        drop(self.stdin);
        let deadline = std::time::Instant::now() + wait;
        while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sweep --worker`: measures the batches read from standard input, answering on standard
/// output. Its runtime is the one the global flags open.
pub fn worker(rt: &dyn Runtime, find: &FindOptions) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let batch: Batch = serde_json::from_str(&line?).context("a sweep worker reads one JSON batch a line")?;
        let p = ConvProblem::from_key(&batch.problem)?;
        let mut items = Vec::new();
        for (i, (solver, config)) in batch.items.iter().enumerate() {
            let resolved = rt.solver(solver).map_err(|e| e.to_string()).and_then(|s| {
                let config: Config = config.parse().map_err(|e: gconv_core::GconvError| e.to_string())?;
                s.check_config(&p, &config).map_err(|e| e.to_string())?;
                Ok((s, config))
            });
            match resolved {
                Ok(item) => items.push((i, item)),
                Err(reason) => reply(
                    &mut out,
                    &Reply::Row { item: i, status: format!("failed: {reason}"), ms: None, workspace_bytes: 0 },
                )?,
            }
        }
        let runnable: Vec<_> = items.iter().map(|(_, item)| item.clone()).collect();
        // Standard output is the sweep's pipe: once it is gone, nobody waits for the rest.
        let mut lost: Option<anyhow::Error> = None;
        sweep_problem(rt, &p, &runnable, find, |event| {
            let answer = match event {
                SweepEvent::Built => Reply::Built { built: true },
                SweepEvent::Measured { item, outcome, workspace_bytes } => {
                    Reply::Row { item: items[item].0, status: outcome.status(), ms: outcome.any_ms(), workspace_bytes }
                }
            };
            if lost.is_none() {
                lost = reply(&mut out, &answer).err();
            }
        })?;
        if let Some(e) = lost {
            return Err(e.context("the sweep stopped reading its worker"));
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn reply(out: &mut impl Write, reply: &Reply) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string(reply)?)?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests;
