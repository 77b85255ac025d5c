//! Embeds the repository's trained models (data/models/<device>/*.json.gz) in the library, so a
//! gconv binary selects by model wherever it runs.

use std::fmt::Write;
use std::path::Path;

fn main() {
    // Read at run time: a build script binary is reused across checkouts at other paths of the
    // same target directory, and env!() would keep the path of the one that compiled it.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for build scripts");
    let root = Path::new(&manifest_dir).join("../../data/models");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    if let Ok(devices) = std::fs::read_dir(&root) {
        for device in devices.flatten().filter(|d| d.path().is_dir()) {
            println!("cargo:rerun-if-changed={}", device.path().display());
            for file in std::fs::read_dir(device.path()).into_iter().flatten().flatten() {
                if file.file_name().to_string_lossy().ends_with(".json.gz") {
                    files.push(file.path());
                }
            }
        }
    }
    // The repository always ships models; none found means a broken checkout, and a binary
    // built from it would silently select by rule everywhere.
    assert!(!files.is_empty(), "no trained models (*.json.gz) under {}", root.display());
    files.sort();
    let mut out = String::from("/// The models in data/models: (device folder, file name, gzipped contents).\npub static EMBEDDED: &[(&str, &str, &[u8])] = &[\n");
    for path in files {
        let path = path.canonicalize().expect("a listed file");
        let device = path.parent().and_then(|d| d.file_name()).and_then(|n| n.to_str()).expect("a device folder");
        let name = path.file_name().and_then(|n| n.to_str()).expect("a file name");
        writeln!(out, "    ({device:?}, {name:?}, include_bytes!({:?})),", path.display().to_string()).unwrap();
    }
    out.push_str("];\n");
    std::fs::write(Path::new(&std::env::var("OUT_DIR").unwrap()).join("embedded.rs"), out).unwrap();
}
