//! The learned heuristic end to end on the CPU, as CI runs it: a synthetic problem set split by
//! shape, sweeps, training, validation with its charts, selection and tuning by the model, and
//! a model retrained on a user's own finds and tuning picking better on those problems.

mod common;

use std::path::Path;

use common::{stderr, stdout, Scratch};

fn ok(scratch: &Scratch, args: &[&str]) -> String {
    let o = scratch.run(args);
    let out = stdout(&o);
    assert!(o.status.success(), "{args:?} failed:\n{out}{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    out
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The mean efficiency `validate` prints on its `all` line.
fn mean_efficiency(validation: &str) -> f64 {
    let line = validation.lines().find(|l| l.trim_start().starts_with("all ")).expect("an `all` line");
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn a_cpu_model_is_trained_validated_and_used() {
    let s = Scratch::new("heuristic");
    let (train, valid) = (s.path("train.txt"), s.path("valid.txt"));
    let out = ok(
        &s,
        &[
            "problems",
            "--count",
            "16",
            "--seed",
            "5",
            "--max-gflop",
            "0.004",
            "--max-melements",
            "0.05",
            "--valid-percent",
            "30",
            "--train-out",
            text(&train),
            "--valid-out",
            text(&valid),
        ],
    );
    assert!(out.contains("training shapes") && out.contains("validation shapes"), "{out}");
    let (train_csv, valid_csv) = (s.path("train.csv"), s.path("valid.csv"));
    ok(&s, &["sweep", "--problems", text(&train), "--out", text(&train_csv), "--find-iter", "1"]);
    let models = s.path("models");
    let out = ok(&s, &["train", text(&train_csv), "--out", text(&models), "--trees", "60"]);
    for name in ["fwd-fp32.json", "bwd-data-fp32.json", "bwd-weight-fp32.json"] {
        assert!(models.join(name).exists() && out.contains(name), "{out}");
    }
    let model: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(models.join("fwd-fp32.json")).unwrap()).unwrap();
    for field in ["format", "gconv_version", "device", "spec", "manifest", "forest"] {
        assert!(model.get(field).is_some(), "the model file has `{field}`");
    }
    assert!(model["manifest"]["rows"].as_u64().unwrap() > 0);

    // Validation measures the problems (a sweep into --measured) and refuses training shapes.
    let plots = s.path("plots");
    let args = [
        "validate",
        "--model",
        text(&models),
        "--problems",
        text(&valid),
        "--measured",
        text(&valid_csv),
        "--training",
        text(&train_csv),
        "--plots",
        text(&plots),
        "--find-iter",
        "1",
    ];
    let out = ok(&s, &args);
    for row in ["fwd f32", "bwd-data f32", "bwd-weight f32", "worst 10:", "slowest", "sum pick", "sum heur"] {
        assert!(out.contains(row), "{out}");
    }
    let efficiency = mean_efficiency(&out);
    assert!((0.0..=100.0).contains(&efficiency), "{out}");
    for chart in ["efficiency-histogram", "predicted-vs-measured", "efficiency-by-class"] {
        for ext in ["png", "svg"] {
            assert!(plots.join(format!("{chart}.{ext}")).metadata().unwrap().len() > 1000, "{chart}.{ext}");
        }
    }
    let o = s.run(&[
        "validate",
        "--model",
        text(&models),
        "--problems",
        text(&train),
        "--measured",
        text(&train_csv),
        "--training",
        text(&train_csv),
        "--no-measure",
    ]);
    assert!(!o.status.success() && stderr(&o).contains("have a training shape"), "{}", stderr(&o));

    // Fast mode picks by the model; select times the ranking; tuning times the top K.
    let problem =
        ["-n", "2", "-c", "16", "-H", "10", "-W", "10", "-k", "16", "-y", "3", "-x", "3", "-p", "1", "-q", "1"];
    let mut conv = vec!["conv", "--models", text(&models), "--find-mode", "fast", "-F", "1", "--db", ""];
    let db = s.db();
    *conv.last_mut().unwrap() = &db;
    conv.extend(problem);
    let out = ok(&s, &conv);
    assert!(out.contains("fast: model") && out.contains(": OK"), "{out}");
    let mut select = vec!["select", "--models", text(&models), "--repeat", "3", "--db", &db];
    select.extend(problem);
    let out = ok(&s, &select);
    assert!(out.contains("model ranking, no memo:") && out.contains("p99") && out.contains("memo hit"), "{out}");
    let mut tune =
        vec!["tune", "--models", text(&models), "--strategy", "model", "--top-k", "2", "--db", &db, "-F", "1"];
    tune.extend(problem);
    let out = ok(&s, &tune);
    assert!(out.contains("model(top_k=2"), "{out}");
}

#[test]
fn a_model_retrained_on_a_users_finds_picks_better_on_them() {
    let s = Scratch::new("heuristic-use");
    let (train, used) = (s.path("train.txt"), s.path("used.txt"));
    ok(
        &s,
        &[
            "problems",
            "--count",
            "10",
            "--seed",
            "11",
            "--max-gflop",
            "0.004",
            "--max-melements",
            "0.05",
            "--valid-percent",
            "40",
            "--train-out",
            text(&train),
            "--valid-out",
            text(&used),
        ],
    );
    let train_csv = s.path("train.csv");
    ok(&s, &["sweep", "--problems", text(&train), "--out", text(&train_csv), "--find-iter", "1"]);
    let models = s.path("models");
    ok(&s, &["train", text(&train_csv), "--out", text(&models), "--trees", "60"]);

    // The user's own work: finds and tuning of other problems, exported as training rows.
    let db = s.db();
    ok(&s, &["find", "--file", text(&used), "--db", &db, "--find-iter", "1"]);
    ok(&s, &["tune", "--file", text(&used), "--db", &db, "--find-iter", "1"]);
    let rows = s.path("rows.csv");
    let out = ok(&s, &["db", "export", "--rows", text(&rows), "--db", &db]);
    assert!(out.contains("timed candidates"), "{out}");
    let judged = |models: &Path| {
        mean_efficiency(&ok(
            &s,
            &[
                "validate",
                "--model",
                text(models),
                "--problems",
                text(&used),
                "--measured",
                text(&rows),
                "--no-measure",
            ],
        ))
    };
    let before = judged(&models);
    let out = ok(&s, &["train", "--out", text(&models), "--append", text(&rows), "--trees", "60"]);
    assert!(out.contains("trained:"), "{out}");
    let after = judged(&models);
    assert!(after >= before && after >= 90.0, "retrained on the user's rows: {before}% -> {after}%");
}
