//! The databases under stress, through the binary: concurrent tuners, a killed tuner, corrupt
//! and future-format files, configs that no longer validate, export / import / merge.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{stderr, stdout, Scratch};
use rusqlite::Connection;

fn count(db: &str, sql: &str) -> i64 {
    try_count(db, sql).unwrap()
}

/// None until the db and its tables exist.
fn try_count(db: &str, sql: &str) -> Option<i64> {
    let conn = Connection::open(db).ok()?;
    conn.busy_timeout(Duration::from_secs(30)).ok()?;
    conn.query_row(sql, [], |r| r.get(0)).ok()
}

fn small_problem(i: usize) -> Vec<String> {
    format!("-n 1 -c {} -H 6 -W 6 -k 8 -y 3 -x 3 -p 1 -q 1 -F 1", 4 + i).split(' ').map(String::from).collect()
}

#[test]
fn eight_concurrent_tuners_lose_no_record() {
    let s = Scratch::new("concurrent");
    let db = s.db();
    let children: Vec<_> = (0..8)
        .map(|i| {
            let mut args = vec!["tune".to_string(), "--db".into(), db.clone()];
            args.extend(small_problem(i));
            s.gconv().args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        assert!(!stderr(&o).contains("error"), "{}", stderr(&o));
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM perf"), 8);
    assert_eq!(count(&db, "SELECT COUNT(DISTINCT problem) FROM find"), 8);
    let configs_per_problem = count(&db, "SELECT COUNT(*) FROM trial") / 8;
    assert!(configs_per_problem > 1);
}

#[test]
fn killed_tuner_keeps_finished_work_and_does_not_redo_it() {
    let s = Scratch::new("kill");
    let db = s.db();
    let file = s.path("problems.txt");
    let lines: Vec<String> =
        (0..10).map(|i| format!("conv -n 2 -c {} -H 20 -W 20 -k 24 -y 3 -x 3 -p 1 -q 1 -F 1", 8 + 4 * i)).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let args = ["tune", "--db", &db, "--file", file.to_str().unwrap()];
    let mut child = s.gconv().args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while try_count(&db, "SELECT COUNT(*) FROM perf").is_none_or(|n| n < 2) {
        assert!(Instant::now() < deadline, "the tuner made no progress");
        assert!(child.try_wait().unwrap().is_none(), "the tuner finished before it could be killed");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // A problem is finished once its find ranking follows its perf record.
    let tuned_at_kill = count(&db, "SELECT COUNT(*) FROM perf WHERE problem IN (SELECT problem FROM find)");
    let trials_at_kill = count(&db, "SELECT COUNT(*) FROM trial");
    assert!(tuned_at_kill < 10, "killed too late to test anything");

    let o = s.run(&args);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert_eq!(out.matches("skipped: already tuned").count() as i64, tuned_at_kill, "{out}");
    let measured: i64 =
        out.lines().filter_map(|l| l.split(" measured").next()?.rsplit(", ").next()?.trim().parse::<i64>().ok()).sum();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM perf"), 10);
    assert_eq!(
        trials_at_kill + measured,
        count(&db, "SELECT COUNT(*) FROM trial"),
        "a config measured before the kill was measured again:\n{out}"
    );
}

#[test]
fn corrupt_or_future_db_is_moved_aside_with_one_warning() {
    let s = Scratch::new("corrupt");
    let db = s.db();
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(&db, &garbage).unwrap();
    let args =
        ["conv", "--db", &db, "-n", "1", "-c", "4", "-H", "5", "-W", "5", "-k", "4", "-F", "1", "--find-mode", "fast"];
    let o = s.run(&args);
    let err = stderr(&o);
    assert!(o.status.success(), "{}{err}", stdout(&o));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is not a usable gconv database") && err.contains("moved it to"), "{err}");
    let aside: Vec<_> = std::fs::read_dir(&s.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("user.db.bad-"))
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read(&aside[0]).unwrap(), garbage, "the bad file is kept as it was");

    Connection::open(&db).unwrap().pragma_update(None, "user_version", 99).unwrap();
    let o = s.run(&args);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("written by a newer gconv: format 99"), "{err}");
    let o = s.run(&["db", "stats", "--db", &db]);
    assert!(o.status.success() && stderr(&o).is_empty(), "{}", stderr(&o));
}

#[test]
fn configs_the_solver_rejects_are_skipped_with_a_warning() {
    let s = Scratch::new("badconfig");
    let db = s.db();
    let problem = ["-n", "1", "-c", "8", "-H", "8", "-W", "8", "-k", "8", "-y", "3", "-x", "3", "-F", "1"];
    let mut tune = vec!["tune", "--db", &db];
    tune.extend(problem);
    assert!(s.run(&tune).status.success());
    let conn = Connection::open(&db).unwrap();
    conn.execute("UPDATE perf SET config = 'rb0_kb8_lo1'", []).unwrap();
    conn.execute("UPDATE find SET config = 'rb0_kb8_lo1', status = 'ok' WHERE solver = 'cpu.direct_blocked'", [])
        .unwrap();
    conn.execute("UPDATE find SET status = 'failed: x' WHERE solver != 'cpu.direct_blocked'", []).unwrap();
    drop(conn);

    let mut conv = vec!["conv", "--db", &db, "--find-mode", "fast"];
    conv.extend(problem);
    let o = s.run(&conv);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{out}{err}");
    assert!(err.contains("warning: skipping find-db entry cpu.direct_blocked `rb0_kb8_lo1`"), "{err}");
    assert!(err.contains("rb must be at least 1"), "{err}");
    assert!(!out.contains("rb0_kb8_lo1"), "the rejected config ran:\n{out}");

    conv.extend(["-S", "cpu.direct_blocked"]);
    let o = s.run(&conv);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{out}{err}");
    assert!(err.contains("warning: skipping config `rb0_kb8_lo1` of cpu.direct_blocked from the perf-db"), "{err}");
    assert!(out.contains("config rb4_kb8_lo1, default"), "{out}");

    // A record of a GPU is judged only where that GPU's solvers are: on this machine, kept.
    Connection::open(&db)
        .unwrap()
        .execute(
            "INSERT INTO perf SELECT problem, 'cuda:Some GPU:sm_90', 'cuda.naive', 'default', 1.0, 1, gconv_version, format_version FROM perf",
            [],
        )
        .unwrap();
    let o = s.run(&["db", "prune", "--db", &db]);
    assert!(stdout(&o).contains("pruned 3 records"), "{}", stdout(&o));
    assert_eq!(count(&db, "SELECT COUNT(*) FROM perf WHERE device LIKE 'cuda:%'"), 1);
}

#[test]
fn export_import_and_merge_round_trip() {
    let s = Scratch::new("export");
    let (db, copy) = (s.db(), s.path("copy.db").to_string_lossy().into_owned());
    let mut tune = vec!["tune", "--db", &db, "--strategy", "random", "--budget-count", "3"];
    tune.extend(["-n", "1", "-c", "8", "-H", "8", "-W", "8", "-k", "8", "-F", "5"]);
    assert!(s.run(&tune).status.success());
    let export = s.path("records.jsonl");
    let o = s.run(&["db", "export", "--jsonl", "--db", &db, "-o", export.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&export).unwrap();
    assert!(text.lines().all(|l| l.starts_with("{\"table\":")), "{text}");

    let o = s.run(&["db", "import", export.to_str().unwrap(), "--db", &copy]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dump = |path: &str| stdout(&s.run(&["db", "dump", "--db", path]));
    assert_eq!(dump(&db), dump(&copy));

    // A slower copy of the perf records does not replace faster ones on merge; import does.
    let slower: String = text
        .lines()
        .filter(|l| l.contains("\"table\":\"perf\""))
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["time_ms"] = serde_json::json!(1.0e6);
            v.to_string() + "\n"
        })
        .collect();
    let slower_file = s.path("slower.jsonl");
    std::fs::write(&slower_file, slower).unwrap();
    let o = s.run(&["db", "merge", slower_file.to_str().unwrap(), "--db", &copy]);
    assert!(stdout(&o).contains("merged 0 records"), "{}", stdout(&o));
    assert_eq!(dump(&db), dump(&copy));
    let o = s.run(&["db", "import", slower_file.to_str().unwrap(), "--db", &copy]);
    assert!(stdout(&o).contains("imported 2 records"), "{}", stdout(&o));
    assert!(dump(&copy).contains("1000000.0000 ms"));

    std::fs::write(&slower_file, "{\"table\":\"perf\"}\n").unwrap();
    let o = s.run(&["db", "import", slower_file.to_str().unwrap(), "--db", &copy]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("line 1"), "{}", stderr(&o));
}

#[test]
fn fast_mode_uses_tuned_configs_without_benchmarking() {
    let s = Scratch::new("fast");
    let db = s.db();
    let file = s.path("problems.txt");
    std::fs::write(
        &file,
        "conv -n 2 -c 16 -H 10 -W 10 -k 16 -y 3 -x 3 -p 1 -q 1\nconvbfp16 -n 2 -c 8 -H 9 -W 9 -k 8 -g 8 -I NHWC -F 2\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let conv = ["conv", "--db", &db, "--file", file, "--find-mode", "fast", "--json", "-V", "0"];

    // An empty db: the built-in CPU model picks the fp32 problem; no model covers bf16 on the
    // CPU, so the rule picks that one. Nothing is measured or stored.
    let o = s.run(&conv);
    assert!(o.status.success(), "{}", stderr(&o));
    let picks: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for r in &picks {
        let expected = if r["key"].as_str().unwrap().contains(":f32:") {
            ("fast: model", "predicted by the model")
        } else {
            ("fast: rule", "default")
        };
        assert_eq!((r["selection"].as_str().unwrap(), r["config_origin"].as_str().unwrap()), expected, "{r}");
    }
    assert_eq!(try_count(&db, "SELECT COUNT(*) FROM find"), Some(0));

    let o = s.run(&["tune", "--db", &db, "--file", file, "--strategy", "random", "--budget-count", "4"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let finds = count(&db, "SELECT COUNT(*) FROM find");
    let o = s.run(&conv);
    assert!(o.status.success(), "{}", stderr(&o));
    let reports: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(reports.len(), 4);
    for r in &reports {
        assert_eq!(r["selection"], "fast: find-db", "{r}");
        let tuned = count(
            &db,
            &format!(
                "SELECT COUNT(*) FROM perf WHERE problem = '{}' AND solver = {} AND config = {}",
                r["key"].as_str().unwrap(),
                r["solver"],
                r["config"]
            )
            .replace('"', "'"),
        );
        let expected = if tuned == 1 { "tuned (perf-db)" } else { "default" };
        assert_eq!(r["config_origin"], expected, "{r}");
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM find"), finds, "fast mode must not run a find");
}

#[test]
fn tune_searches_only_the_named_solvers_and_says_why_others_are_not() {
    let s = Scratch::new("named");
    let db = s.db();
    let problem = small_problem(0);
    let tune = |solvers: &[&str]| {
        let mut args = vec!["tune", "--db", &db, "--find-iter", "1"];
        args.extend(solvers.iter().flat_map(|id| ["--solver", id]));
        args.extend(problem.iter().map(String::as_str));
        s.run(&args)
    };
    let o = tune(&["cpu.direct_blocked", "cpu.gemm_1x1"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("not searched, cpu.gemm_1x1: not applicable: needs a 1x1 filter"), "{}", stdout(&o));
    assert!(stdout(&o).contains("cpu.direct_blocked: "), "{}", stdout(&o));
    assert_eq!(count(&db, "SELECT COUNT(DISTINCT solver) FROM trial"), 1);

    let o = tune(&["cpu.im2col_gemm"]);
    assert!(!o.status.success());
    assert!(stdout(&o).contains("cpu.im2col_gemm: it has no configs to search"), "{}", stdout(&o));
    assert!(stderr(&o).contains("none of the problems has a space to search for cpu.im2col_gemm"), "{}", stderr(&o));

    let o = tune(&["cpu.nope"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown solver `cpu.nope`"), "{}", stderr(&o));
}
