//! The `gconv` binary as a user runs it: results, JSON, batches, and one clear line on bad input.

mod common;

use std::process::Output;

use common::{stderr, stdout, Scratch};

fn run(args: &[&str]) -> Output {
    Scratch::new("cli").run(args)
}

/// Fails unless the command exits non-zero with exactly one line on stderr containing `needle`.
fn assert_rejected(args: &[&str], needle: &str) {
    let o = run(args);
    let err = stderr(&o);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: expected one line, got:\n{err}");
    assert!(err.contains(needle), "{args:?}: `{needle}` not in: {err}");
}

const SMALL: [&str; 18] =
    ["-n", "2", "-c", "8", "-H", "9", "-W", "7", "-k", "6", "-y", "3", "-x", "3", "-p", "1", "-q", "1"];

#[test]
fn grouped_problem_verifies_in_all_three_directions() {
    let o = run(&[
        "conv", "-n", "4", "-c", "64", "-H", "28", "-W", "28", "-k", "64", "-y", "3", "-x", "3", "-p", "1", "-q", "1",
        "-g", "32", "-F", "0", "-V", "1", "-t", "1",
    ]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    for direction in ["fwd", "bwd-data", "bwd-weight"] {
        assert!(
            out.contains(&format!("key:       v1:{direction}:f32:NCHW:n4:c64:k64:i28x28:f3x3:s1x1:p1x1:d1x1:g32")),
            "{out}"
        );
    }
    assert_eq!(out.matches(": OK").count(), 3, "{out}");
    assert_eq!(out.matches("GFLOP/s").count(), 3, "{out}");
}

#[test]
fn json_prints_one_object_per_direction() {
    let mut args = vec!["convbfp16", "--json", "-F", "5", "-t", "1", "-i", "2", "-I", "NHWC", "-g", "2"];
    args.extend(SMALL);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> =
        stdout(&o).lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["direction"], "fwd");
    assert_eq!(lines[1]["direction"], "bwd-weight");
    for line in &lines {
        assert!(line["key"].as_str().unwrap().contains(":bf16:NHWC:"));
        assert_eq!(line["verify"]["passed"], true);
        assert!(line["time_ms"].as_f64().unwrap() > 0.0);
        assert!(line["tflops"].as_f64().unwrap() > 0.0);
        assert!(line["solver"].as_str().unwrap().starts_with("cpu."));
    }
}

#[test]
fn allow_tf32_makes_fp32_problems_tf32_ones() {
    let mut args = vec!["conv", "--allow-tf32", "-F", "1", "-t", "1", "-I", "NHWC"];
    args.extend(SMALL);
    let o = run(&args);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("key:       v1:fwd:tf32:NHWC:n2:c8:k6:i9x7:f3x3:s1x1:p1x1:d1x1"), "{out}");
    assert_eq!(out.matches(": OK").count(), 1, "{out}");
    // Only fp32 changes: a bf16 run stays bf16.
    args[0] = "convbfp16";
    let out = stdout(&run(&args));
    assert!(out.contains("key:       v1:fwd:bf16:NHWC"), "{out}");
}

#[test]
fn every_solver_can_be_forced_and_verifies() {
    for (solver, extra) in [
        ("cpu.reference", vec![]),
        ("cpu.im2col_gemm", vec!["-I", "NCDHW", "--spatial_dim", "3", "-!", "4", "-@", "2", "-#", "2"]),
        ("cpu.direct_blocked", vec!["-I", "NWC", "--spatial_dim", "1", "-l", "2", "-j", "2"]),
        ("cpu.depthwise", vec!["-g", "8", "-k", "8", "-u", "2"]),
        ("cpu.gemm_1x1", vec!["-y", "1", "-x", "1", "-p", "0", "-q", "0"]),
    ] {
        let mut args = vec!["convfp16", "-S", solver];
        args.extend(SMALL);
        args.extend(extra);
        let o = run(&args);
        let out = stdout(&o);
        assert!(o.status.success(), "{solver}: {out}{}", stderr(&o));
        assert_eq!(out.matches(&format!("solver:    {solver} ")).count(), 3, "{out}");
        assert_eq!(out.matches(": OK").count(), 3, "{out}");
    }
}

#[test]
fn a_forced_solver_runs_the_config_given() {
    let mut args = vec!["conv", "-F", "1", "-S", "cpu.direct_blocked", "--config", "rb2_kb4_lo1"];
    args.extend(SMALL);
    let o = run(&args);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("config rb2_kb4_lo1, given (--config)"), "{out}");
    assert!(out.contains(": OK"), "{out}");
}

#[test]
fn bad_input_gets_one_clear_line() {
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec!["conv"];
        args.extend(SMALL);
        args.extend(extra);
        args
    };
    assert_rejected(&with(&["-g", "3"]), "C=8 is not divisible by G=3");
    assert_rejected(&with(&["-g", "4", "-k", "6"]), "K=6 is not divisible by G=4");
    assert_rejected(&with(&["-y", "12", "-p", "0"]), "output size along H");
    assert_rejected(&with(&["-n", "0"]), "N must be at least 1");
    assert_rejected(&with(&["-W", "0"]), "input size W must be at least 1");
    assert_rejected(&with(&["-u", "0"]), "stride along H must be at least 1");
    assert_rejected(&with(&["--bogus", "1"]), "unexpected argument '--bogus'");
    assert_rejected(&with(&["-n", "99999999999"]), "99999999999 is not in 0..=4294967295");
    assert_rejected(&with(&["-p", "-1"]), "invalid value '-1'");
    assert_rejected(&with(&["-n", "65536", "-c", "65536"]), "more than 2147483647 elements");
    assert_rejected(&with(&["--spatial_dim", "4"]), "--spatial_dim 4 is not supported");
    assert_rejected(&with(&["-m", "trans"]), "mode `trans` is not supported");
    assert_rejected(&with(&["-F", "9"]), "-F 9 is not a direction set");
    assert_rejected(&with(&["-I", "NHWC", "-f", "NCHW"]), "mixed layouts are not supported");
    assert_rejected(&with(&["-I", "NDHWC"]), "is a 3D layout but --spatial_dim is 2");
    assert_rejected(&with(&["-I", "CHWN"]), "unknown layout `CHWN`");
    assert_rejected(&with(&["-S", "cpu.gemm_1x1"]), "needs a 1x1 filter");
    assert_rejected(&with(&["-S", "cpu.nonexistent"]), "unknown solver `cpu.nonexistent`");
    assert_rejected(&with(&["-V", "2"]), "invalid value '2'");
    assert_rejected(&with(&["--config", "rb2_kb4_lo1"]), "--config rb2_kb4_lo1 needs -S");
    assert_rejected(&with(&["-S", "cpu.direct_blocked", "--config", "rb2"]), "invalid config `rb2`");
    assert_rejected(&with(&["-S", "cpu.reference", "--config", "rb2_kb4_lo1"]), "has nothing to tune");
    assert_rejected(&["conv", "--file", "/nonexistent/problems.txt"], "cannot read /nonexistent/problems.txt");
    assert_rejected(&["explain", "v1:fwd:f32:NCHW:n1"], "invalid problem key");
    assert_rejected(&["frobnicate"], "unrecognized subcommand 'frobnicate'");
}

#[test]
fn batch_file_runs_every_line_and_reports_bad_ones() {
    let dir = std::env::temp_dir().join(format!("gconv-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("problems.txt");
    std::fs::write(
        &file,
        "# ResNet-like layers\n\
         ./bin/MIOpenDriver conv -n 2 -c 8 -H 6 -W 6 -k 8 -y 3 -x 3 -p 1 -q 1 -F 1\n\
         \n\
         convbfp16 -n 1 -c 4 -H 5 -W 5 -k 4 -y 1 -x 1 -F 4   # trailing comment\n\
         conv -n 1 -c 6 -H 5 -W 5 -k 4 -g 4 -F 1\n\
         -n 1 -c 4 -H 5 -W 5 -k 4 -g 4 -F 2 -I NHWC\n",
    )
    .unwrap();
    let o = run(&["convfp16", "--json", "-t", "1", "-i", "2", "--file", file.to_str().unwrap()]);
    assert!(!o.status.success(), "line 5 is invalid, so the batch fails");
    let err = stderr(&o);
    assert!(err.contains("problems.txt:5: invalid problem: C=6 is not divisible by G=4"), "{err}");
    let reports: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(reports.iter().all(|r| r["samples"] == 2), "the command line's -t and -i apply to every line");
    let keys: Vec<&str> = reports.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "v1:fwd:f32:NCHW:n2:c8:k8:i6x6:f3x3:s1x1:p1x1:d1x1",
            "v1:bwd-weight:bf16:NCHW:n1:c4:k4:i5x5:f1x1:s1x1:p0x0:d1x1",
            "v1:bwd-data:f16:NHWC:n1:c4:k4:i5x5:f3x3:s1x1:p0x0:d1x1:g4",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn explain_lists_every_solver_with_reasons() {
    let o = run(&["explain", "v1:bwd-data:f16:NHWC:n2:c8:k8:i9x9:f3x3:s2x2:p1x1:d1x1:g8"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    for id in ["cpu.gemm_1x1", "cpu.depthwise", "cpu.im2col_gemm", "cpu.direct_blocked", "cpu.reference"] {
        assert!(out.contains(id), "{id} missing:\n{out}");
    }
    assert!(out.contains("needs a 1x1 filter"), "{out}");
    let o = run(&["explain", "-n", "1", "-c", "8", "-k", "4", "-H", "8", "-W", "8", "-F", "3"]);
    let out = stdout(&o);
    assert!(o.status.success());
    assert!(out.contains("needs G = C = K (depthwise), got G=1 C=8 K=4"), "{out}");
    assert_eq!(out.matches("key:").count(), 2, "-F 3 is fwd and bwd-data:\n{out}");
}

#[test]
fn sweep_writes_every_candidate_once_and_resumes() {
    let scratch = Scratch::new("sweep");
    let problems = scratch.path("problems.txt");
    std::fs::write(&problems, "v1:fwd:f32:NCHW:n2:c8:k8:i9x9:f3x3:s1x1:p1x1:d1x1:g2\nv1:bwd-data:f32:NHWC:n2:c6:k6:i7x7:f3x3:s2x2:p1x1:d1x1:g6\n").unwrap();
    let out = scratch.path("sweep.csv");
    let args = ["sweep", "--problems", problems.to_str().unwrap(), "--out", out.to_str().unwrap(), "--find-iter", "1"];
    let first = scratch.run(&args);
    assert!(first.status.success(), "{}{}", stdout(&first), stderr(&first));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with(
            "kernel,problem_idx,N,C,K,G,Hi,Wi,Y,X,stride_h,stride_w,pad_h,pad_w,latency_ms,tflops,non_zero,"
        ),
        "{header}"
    );
    let rows: Vec<&str> = lines.collect();
    assert!(rows.len() > 2 && rows.iter().all(|r| r.contains(",ok,v1:")), "{text}");
    assert!(
        rows.iter().any(|r| r.contains(",1,")) && rows.iter().any(|r| r.starts_with("cpu.") && r.contains(",0,")),
        "both problems: {text}"
    );
    assert!(
        rows.iter().any(|r| r.starts_with("cpu.im2col_gemm:default,")),
        "solvers with nothing to tune run their default: {text}"
    );

    let again = scratch.run(&args);
    let said = stdout(&again);
    assert!(said.contains(&format!("{} rows already in", rows.len())) && said.contains("measured:  0 ok,"), "{said}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text, "a resumed sweep adds nothing");

    let remeasured = scratch.run(&[&args[..], &["--remeasure", "cpu.im2col_gemm"]].concat());
    let said = stdout(&remeasured);
    let of_solver = rows.iter().filter(|r| r.starts_with("cpu.im2col_gemm:")).count();
    assert!(said.contains(&format!("({of_solver} of cpu.im2col_gemm to measure again)")), "{said}");
    let grown = std::fs::read_to_string(&out).unwrap();
    let added: Vec<&str> = grown.lines().skip(1 + rows.len()).collect();
    assert!(added.len() == of_solver && added.iter().all(|r| r.starts_with("cpu.im2col_gemm:")), "{grown}");
    assert_rejected(&[&args[..], &["--remeasure", "cpu.nonesuch"]].concat(), "--remeasure cpu.nonesuch");
}

#[test]
fn a_sweep_past_its_time_limit_stops_and_a_later_one_goes_on() {
    let scratch = Scratch::new("sweep-limit");
    let problems = scratch.path("problems.txt");
    std::fs::write(
        &problems,
        "v1:fwd:f32:NCHW:n1:c4:k4:i6x6:f3x3:s1x1:p1x1:d1x1
",
    )
    .unwrap();
    let out = scratch.path("sweep.csv");
    let args = ["sweep", "--problems", problems.to_str().unwrap(), "--out", out.to_str().unwrap(), "--find-iter", "1"];
    let cut = scratch.run(&[&args[..], &["--time-limit-s", "0.000001"]].concat());
    let said = stdout(&cut);
    assert!(cut.status.success(), "{said}{}", stderr(&cut));
    assert!(said.contains("measured:  0 ok,") && said.contains("stopped:   at the time limit"), "{said}");
    let rest = scratch.run(&args);
    let said = stdout(&rest);
    assert!(rest.status.success() && !said.contains("measured:  0 ok,") && !said.contains("stopped:"), "{said}");
    let bad = scratch.run(&[&args[..], &["--time-limit-s", "0"]].concat());
    assert!(
        !bad.status.success() && stderr(&bad).contains("--time-limit-s must be a positive number"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn an_early_stopping_sweep_leaves_slow_candidates_at_one_call() {
    let scratch = Scratch::new("sweep-early");
    let problems = scratch.path("problems.txt");
    // cpu.gemm_1x1 runs first; cpu.im2col_gemm's copy takes it to about three times as long.
    std::fs::write(&problems, "v1:fwd:f32:NCHW:n2:c64:k64:i16x16:f1x1:s1x1:p0x0:d1x1\n").unwrap();
    let out = scratch.path("sweep.csv");
    let args = ["sweep", "--problems", problems.to_str().unwrap(), "--out", out.to_str().unwrap(), "--early-stop"];
    let o = scratch.run(&args);
    assert!(o.status.success() && stdout(&o).contains("stopped early"), "{}{}", stdout(&o), stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let (latency, status) = (14, 34);
    assert!(rows.iter().all(|r| !r[latency].is_empty() && ["ok", "time-boxed"].contains(&r[status])), "{text}");
    let fastest_ok = rows.iter().filter(|r| r[status] == "ok").map(|r| r[latency].parse::<f64>().unwrap());
    let fastest_ok = fastest_ok.fold(f64::INFINITY, f64::min);
    let boxed: Vec<f64> =
        rows.iter().filter(|r| r[status] == "time-boxed").map(|r| r[latency].parse().unwrap()).collect();
    assert!(!boxed.is_empty() && boxed.iter().all(|&ms| ms > fastest_ok), "{text}");
}

#[test]
fn sweep_refuses_a_csv_that_is_not_its_own() {
    let scratch = Scratch::new("sweep-bad");
    let problems = scratch.path("problems.txt");
    std::fs::write(&problems, "v1:fwd:f32:NCHW:n2:c8:k8:i9x9:f3x3:s1x1:p1x1:d1x1\n").unwrap();
    let other = scratch.path("other.csv");
    std::fs::write(&other, "key,time\nx,1\n").unwrap();
    assert_rejected(
        &["sweep", "--problems", problems.to_str().unwrap(), "--out", other.to_str().unwrap()],
        "is not a sweep CSV",
    );
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "key,time\nx,1\n", "left as it was");
    assert_rejected(
        &["sweep", "--problems", problems.to_str().unwrap(), "--out", "x.csv", "--timeout-s", "0"],
        "--timeout-s must be a positive",
    );
}

#[test]
fn check_runs_every_solver_on_seeded_random_problems_and_on_keys() {
    let o = run(&[
        "check",
        "--backend",
        "cpu",
        "--seed",
        "7",
        "--seeds",
        "2",
        "--cases",
        "4",
        "--direction",
        "bwd-data",
        "--sample",
        "1",
    ]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(
        out.contains("seed 7: 4 random problems (bwd-data) match the reference") && out.contains("seed 8:"),
        "{out}"
    );
    let key = "v1:fwd:bf16:NHWC:n2:c8:k8:i9x9:f3x3:s1x1:p1x1:d1x1:g2";
    let o = run(&["check", "--backend", "cpu", "--key", key, "--sample", "1"]);
    assert!(
        o.status.success() && stdout(&o).contains(&format!("{key}: every solver matches the reference")),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    assert_rejected(&["check", "--backend", "cpu", "--key", "v1:fwd:f32:NCHW:n0"], "--key v1:fwd:f32:NCHW:n0");
}

#[test]
fn a_given_dtype_applies_to_every_line_of_a_file() {
    let scratch = Scratch::new("dtype");
    let file = scratch.path("problems.txt");
    std::fs::write(
        &file,
        "conv -n 1 -c 8 -H 8 -W 8 -k 8 -y 3 -x 3 -p 1 -q 1 -F 1\nv1:fwd:f32:NCHW:n1:c8:k8:i8x8:f1x1:s1x1:p0x0:d1x1\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let db = scratch.db();
    let o =
        scratch.run(&["select", "--backend", "cpu", "--db", &db, "--repeat", "1", "--file", file, "--dtype", "bf16"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert_eq!(out.matches("v1:fwd:bf16:NCHW").count(), 2, "`conv` lines and keys take --dtype: {out}");
    let o = scratch.run(&["select", "--backend", "cpu", "--db", &db, "--repeat", "1", "--file", file]);
    assert_eq!(stdout(&o).matches("v1:fwd:f32:NCHW").count(), 2, "without --dtype the command word decides");
}
