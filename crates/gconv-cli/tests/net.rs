//! `gconv net` on the CPU, end to end: tune a small committed network over dtype and layout
//! knobs, write the tuning JSON, run from it with no tuning and no find, report it with its
//! chart, and refuse what does not fit.

mod common;

use common::{stderr, stdout, Scratch};

/// A test data file, found from the crate (cargo test) or the repository root (packed tests).
fn data(name: &str) -> String {
    [format!("tests/data/{name}"), format!("crates/gconv-cli/tests/data/{name}")]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("the test data")
        .to_string()
}

fn tiny_net() -> String {
    data("tiny-net.txt")
}

#[test]
fn a_network_is_tuned_run_and_reported_from_its_tuning_json() {
    let s = Scratch::new("net");
    let (net, json, plots) = (tiny_net(), s.path("t.json"), s.path("plots"));
    let json = json.to_str().unwrap();
    let tuned = s.run(&[
        "net",
        "tune",
        &net,
        "--knobs",
        "dtype=f32,bf16",
        "--per-layer",
        "--dir",
        "fwd,bwd-data,bwd-weight",
        "--find-iter",
        "2",
        "-o",
        json,
        "--db",
        &s.db(),
    ]);
    assert!(tuned.status.success(), "{}", stderr(&tuned));
    let out = stdout(&tuned);
    for setting in ["f32/NCHW", "f32/NHWC", "bf16/NCHW", "bf16/NHWC"] {
        assert!(out.contains(setting), "{out}");
    }
    assert!(out.contains("winner:"), "{out}");
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(file["winner"]["layers"].as_array().unwrap().len(), 5);
    assert_eq!(file["settings"].as_array().unwrap().len(), 4);
    // Every bf16 problem carries its error against fp32: small, not zero.
    let bf16 = file["settings"].as_array().unwrap().iter().find(|s| s["setting"] == "bf16/NHWC").unwrap();
    for shape in bf16["shapes"].as_array().unwrap() {
        for choice in shape["choices"].as_array().unwrap() {
            let error = choice["error"].as_f64().unwrap();
            assert!(error > 0.0 && error < 0.05, "{choice}");
        }
    }

    let run = s.run(&["net", "run", &net, "--tuning", json, "--iter", "2", "--db", &s.db()]);
    assert!(run.status.success(), "{}", stderr(&run));
    let out = stdout(&run);
    assert!(out.contains("15 from the tuning file, 0 picked in fast mode; no tuning, no find"), "{out}");
    assert!(out.contains("first iteration:") && out.contains("warm iteration:"), "{out}");

    let report = s.run(&["net", "report", json, "--plots", plots.to_str().unwrap()]);
    assert!(report.status.success(), "{}", stderr(&report));
    assert!(plots.join("layers-by-setting.png").exists() && plots.join("layers-by-setting.svg").exists());

    // Against another library's times of the same keys (bench/torch_conv.py's CSV): every
    // problem key and its channels-last twin listed once; at 1 ms a key, each setting's
    // library total is its problem count, and the winner is set against it.
    let keys = s.run(&["net", "report", json, "--keys"]);
    assert!(keys.status.success(), "{}", stderr(&keys));
    let keys: Vec<String> = stdout(&keys).lines().map(str::to_string).collect();
    assert!(keys.iter().all(|k| k.starts_with("v1:")) && keys.iter().any(|k| k.contains(":NHWC:")), "{keys:?}");
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), keys.len(), "{keys:?}");
    let torch_csv = s.path("torch.csv");
    let rows: String = keys.iter().map(|k| format!("{k},1.0\n")).collect();
    std::fs::write(&torch_csv, format!("key,torch_ms\n{rows}")).unwrap();
    let against = s.run(&["net", "report", json, "--torch-csv", torch_csv.to_str().unwrap()]);
    assert!(against.status.success(), "{}", stderr(&against));
    let out = stdout(&against);
    assert!(out.contains("PyTorch ms") && out.contains("vs PyTorch: winner's layers"), "{out}");
    assert!(out.lines().any(|l| l.trim_start().starts_with("f32/NCHW") && l.contains(" 15.000 ")), "{out}");

    // Another batch is another network: refused with the reason, or used layer by layer.
    let other = s.run(&["net", "run", &net, "--batch", "3", "--tuning", json, "--db", &s.db()]);
    assert!(!other.status.success());
    assert!(stderr(&other).contains("--layer-by-layer"), "{}", stderr(&other));
    let partial = s.run(&[
        "net",
        "run",
        &net,
        "--batch",
        "3",
        "--tuning",
        json,
        "--layer-by-layer",
        "--iter",
        "1",
        "--db",
        &s.db(),
    ]);
    assert!(partial.status.success(), "{}", stderr(&partial));
    assert!(stdout(&partial).contains("15 picked in fast mode"), "{}", stdout(&partial));
}

#[test]
fn bad_network_input_is_refused_with_a_message() {
    let s = Scratch::new("net-bad");
    let bad_net = s.path("bad.txt");
    std::fs::write(&bad_net, "a <- input : v1:fwd:f32:NCHW:n1:c3:k8:i8x8:f3x3:s1x1:p1x1:d1x1\nb <- nowhere : v1:fwd:f32:NCHW:n1:c8:k8:i8x8:f3x3:s1x1:p1x1:d1x1\n").unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["net", "tune", "no-such-net"], "neither a built-in network"),
        (&["net", "tune", bad_net.to_str().unwrap()], "line 2: `nowhere` is not a layer defined above"),
        (&["net", "tune", "squeezenet1_1", "--knobs", "dtype=f64"], "--knobs `dtype=f64`"),
        (&["net", "tune", "squeezenet1_1", "--dir", "sideways"], "--dir"),
        (&["net", "report", bad_net.to_str().unwrap()], "not a gconv tuning file"),
    ];
    for (args, message) in cases {
        let out = s.run(args);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
}

/// tiny-net.onnx (tests/data/make_onnx.py): a symbolic batch and no recorded intermediate
/// shapes, so every layer's shape is inferred; tuned, run and reported like a built-in network.
#[cfg(feature = "onnx")]
#[test]
fn an_onnx_model_is_tuned_run_and_reported() {
    let s = Scratch::new("net-onnx");
    let (model, json) = (data("tiny-net.onnx"), s.path("onnx.json"));
    let json = json.to_str().unwrap();
    let tuned = s.run(&[
        "net",
        "tune",
        "--onnx",
        &model,
        "--batch",
        "2",
        "--knobs",
        "dtype=f32",
        "--knobs",
        "layout=NCHW",
        "--by",
        "model",
        "-o",
        json,
        "--db",
        &s.db(),
    ]);
    assert!(tuned.status.success(), "{}", stderr(&tuned));
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let layers: Vec<(String, String, Vec<String>)> = file["network"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["key"].as_str().unwrap().to_string(),
                l["inputs"].as_array().unwrap().iter().map(|i| i.as_str().unwrap().to_string()).collect(),
            )
        })
        .collect();
    let expected = [
        ("stem", "v1:fwd:f32:NCHW:n2:c3:k8:i16x16:f3x3:s1x1:p1x1:d1x1", vec!["input"]),
        ("grouped", "v1:fwd:f32:NCHW:n2:c8:k16:i16x16:f3x3:s2x2:p1x1:d1x1:g4", vec!["stem"]),
        ("branch", "v1:fwd:f32:NCHW:n2:c16:k16:i8x8:f1x1:s1x1:p0x0:d1x1", vec!["grouped"]),
        ("depthwise", "v1:fwd:f32:NCHW:n2:c16:k16:i8x8:f3x3:s1x1:p1x1:d1x1:g16", vec!["grouped", "branch"]),
        ("head", "v1:fwd:f32:NCHW:n2:c16:k10:i8x8:f1x1:s1x1:p0x0:d1x1", vec!["depthwise"]),
    ];
    assert_eq!(layers.len(), expected.len(), "{layers:?}");
    for ((name, key, inputs), (want_name, want_key, want_inputs)) in layers.iter().zip(expected) {
        assert_eq!((name.as_str(), key.as_str()), (want_name, want_key));
        assert_eq!(inputs, &want_inputs, "{name}");
    }
    assert_eq!(file["network"]["outputs"], serde_json::json!(["head"]));

    let run = s.run(&["net", "run", &model, "--batch", "2", "--tuning", json, "--iter", "1", "--db", &s.db()]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stdout(&run).contains("0 picked in fast mode"), "{}", stdout(&run));
    let report = s.run(&["net", "report", json]);
    assert!(report.status.success() && stdout(&report).contains("depthwise"), "{}", stderr(&report));

    let cases: [(&[&str], &str); 3] = [
        (&["net", "tune", "--onnx", &model], "the batch is symbolic (N): give --batch"),
        (
            &["net", "tune", "--onnx", &data("asymmetric-pad.onnx")],
            "convolution `padded`: padding 0 before and 1 after",
        ),
        (&["net", "tune", "--onnx", &data("tiny-net.txt")], "tiny-net.txt"),
    ];
    for (args, message) in cases {
        let out = s.run(args);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
}

/// A tuning worker (what `net tune` starts per GPU) measures every W-th problem and prints its
/// share as one JSON line; the shares of all workers cover every problem once.
#[test]
fn tuning_workers_share_the_problems() {
    let s = Scratch::new("net-workers");
    let net = tiny_net();
    let mut seen = Vec::new();
    for part in ["0/2", "1/2"] {
        let out = s.run(&[
            "net",
            "tune",
            &net,
            "--knobs",
            "dtype=f32",
            "--knobs",
            "layout=NCHW",
            "--by",
            "model",
            "--worker-part",
            part,
            "--db",
            &s.db(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let share: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        for choice in share["choices"].as_array().unwrap() {
            seen.push(choice[0].as_u64().unwrap());
            assert!(choice[1]["ms"].as_f64().unwrap() > 0.0, "{choice}");
        }
    }
    seen.sort();
    assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>());
    let cpu = s.run(&["net", "tune", &net, "--devices", "0,1"]);
    assert!(
        !cpu.status.success() && stderr(&cpu).contains("--devices shares the tuning among GPUs"),
        "{}",
        stderr(&cpu)
    );
}
