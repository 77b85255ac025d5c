use thiserror::Error;

#[derive(Debug, Error)]
pub enum TuneError {
    #[error(transparent)]
    Gconv(#[from] gconv_core::GconvError),
    #[error("database: {0}")]
    Db(String),
    #[error("import: {0}")]
    Import(String),
    #[error("{0}")]
    Io(String),
}

impl From<rusqlite::Error> for TuneError {
    fn from(e: rusqlite::Error) -> Self {
        TuneError::Db(e.to_string())
    }
}

pub type Result<T, E = TuneError> = std::result::Result<T, E>;
