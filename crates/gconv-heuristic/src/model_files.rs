//! Model files: a folder's `<direction>-<family>.json.gz` (or `.json`, as gconv wrote them
//! before 2026-11-29) read and written, and the repository's models embedded at build time.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::model::{Model, ModelSet};
use crate::{Error, Result};

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

pub(crate) const GZIPPED: &str = ".json.gz";

/// Whether a file name is a model file's, gzipped (`Some(true)`) or not.
fn model_file_kind(name: &str) -> Option<bool> {
    if name.ends_with(GZIPPED) {
        Some(true)
    } else if name.ends_with(".json") {
        Some(false)
    } else {
        None
    }
}

impl Model {
    /// A model file's contents, gzipped (`*.json.gz`) or not (`*.json`, as gconv wrote before
    /// 2026-11-29).
    fn from_file_bytes(bytes: &[u8], gzipped: bool, origin: &str) -> Result<Self> {
        if !gzipped {
            let text = std::str::from_utf8(bytes)
                .map_err(|e| Error::BadModel { origin: origin.to_string(), reason: e.to_string() })?;
            return Model::from_json(text, origin);
        }
        let mut text = String::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_string(&mut text)
            .map_err(|e| Error::BadModel { origin: origin.to_string(), reason: format!("not gzipped JSON: {e}") })?;
        Model::from_json(&text, origin)
    }
}

impl ModelSet {
    /// The models of a folder (every `*.json.gz` and `*.json` in it).
    pub fn read_dir(dir: &Path) -> Result<Self> {
        let entries = std::fs::read_dir(dir).map_err(|e| Error::Io { path: dir.to_path_buf(), source: e })?;
        let mut paths: Vec<(PathBuf, bool)> = entries
            .flatten()
            .map(|e| e.path())
            .filter_map(|p| model_file_kind(&p.file_name()?.to_string_lossy()).map(|gzipped| (p, gzipped)))
            .collect();
        paths.sort();
        let models = paths
            .iter()
            .map(|(path, gzipped)| {
                let bytes = std::fs::read(path).map_err(|e| Error::Io { path: path.clone(), source: e })?;
                Model::from_file_bytes(&bytes, *gzipped, &path.display().to_string())
            })
            .collect::<Result<Vec<_>>>()?;
        if models.is_empty() {
            return Err(Error::BadModel {
                origin: dir.display().to_string(),
                reason: "the folder holds no model (*.json.gz or *.json)".into(),
            });
        }
        Ok(ModelSet { origin: dir.display().to_string(), models })
    }

    /// The sets embedded from the repository's data/models, one per device folder.
    pub fn embedded() -> Result<Vec<Self>> {
        let mut sets: Vec<ModelSet> = Vec::new();
        for (device, name, bytes) in EMBEDDED {
            let origin = format!("data/models/{device} (built in)");
            let gzipped = model_file_kind(name) == Some(true);
            let model = Model::from_file_bytes(bytes, gzipped, &format!("data/models/{device}/{name}"))?;
            match sets.iter_mut().find(|s| s.origin == origin) {
                Some(set) => set.models.push(model),
                None => sets.push(ModelSet { origin, models: vec![model] }),
            }
        }
        Ok(sets)
    }

    /// Writes each model as `<direction>-<family>.json.gz` into `dir`, in place of an
    /// ungzipped file of the same model that would otherwise load beside it.
    pub fn write_dir(models: &[Model], dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io { path: dir.to_path_buf(), source: e })?;
        models
            .iter()
            .map(|m| {
                let path = dir.join(m.file_name());
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                serde_json::to_writer(&mut gz, m).expect("a model serialises");
                let bytes = gz.finish().expect("gzip into memory");
                let temp = dir.join(format!("{}.tmp", m.file_name()));
                let plain = dir.join(m.file_name().trim_end_matches(".gz"));
                std::fs::write(&temp, bytes)
                    .and_then(|_| std::fs::rename(&temp, &path))
                    .and_then(|_| match std::fs::remove_file(&plain) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                        _ => Ok(()),
                    })
                    .map_err(|e| Error::Io { path: path.clone(), source: e })?;
                Ok(path)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_ungzipped_model_loads_and_a_rewrite_replaces_it() {
        let dir = std::env::temp_dir().join(format!("gconv-model-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cpu = ModelSet::embedded().unwrap().into_iter().find(|s| s.origin.contains("cpu")).expect("built in");
        let model = cpu.models[0].clone();
        let plain = dir.join(model.file_name().trim_end_matches(".gz"));
        std::fs::write(&plain, serde_json::to_string(&model).unwrap()).unwrap();
        assert_eq!(ModelSet::read_dir(&dir).unwrap().models, vec![model.clone()]);

        let written = ModelSet::write_dir(std::slice::from_ref(&model), &dir).unwrap();
        assert_eq!(written, vec![dir.join(model.file_name())]);
        assert!(!plain.exists(), "the ungzipped file would load beside its replacement");
        assert_eq!(ModelSet::read_dir(&dir).unwrap().models, vec![model]);

        std::fs::write(dir.join("bwd-data-fp32.json.gz"), b"not gzip").unwrap();
        let err = ModelSet::read_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("bwd-data-fp32.json.gz") && err.contains("not gzipped JSON"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
