//! Inputs: a file, a gzip-compressed file, a directory of them, standard input, any reader, or
//! a caller's own [`Frames`]; the format detected from the content unless it is given.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flate2::read::MultiGzDecoder;

use crate::error::IngestError;
use crate::frames::directory::Directory;
use crate::frames::lines::Lines;
use crate::frames::records::Records;
use crate::frames::{Frames, PeerControl, READ_BUFFER, Reader};

/// An input's format: how its records are framed and encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// Newline-delimited protobuf JSON, one `BusEvent` per line.
    Ndjson,
    /// Vega's event buffer file: length-prefixed protobuf `BusEvent` records.
    VegaBuffer,
}

/// The two bytes every gzip member starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

impl Format {
    /// The format whose first bytes these are: `{` or whitespace first (or nothing) is NDJSON,
    /// anything else a buffer file (whose first byte is the high byte of a record's size).
    pub fn detect(start: &[u8]) -> Format {
        match start.first() {
            None | Some(b'{') => Format::Ndjson,
            Some(byte) if byte.is_ascii_whitespace() => Format::Ndjson,
            Some(_) => Format::VegaBuffer,
        }
    }
}

/// What to ingest.
pub struct Input(Source);

enum Source {
    Path(PathBuf),
    Reader {
        name: Arc<str>,
        reader: Box<dyn Read + Send>,
    },
    Frames(Box<dyn Frames>),
}

impl Input {
    /// A file (maybe gzip-compressed) or a directory of such files, read in file-name order.
    pub fn path(path: impl Into<PathBuf>) -> Input {
        Input(Source::Path(path.into()))
    }

    /// Standard input (maybe gzip-compressed).
    pub fn stdin() -> Input {
        Input::reader("standard input", io::stdin())
    }

    /// Any reader (maybe gzip-compressed); `name` names it in errors.
    pub fn reader(name: &str, reader: impl Read + Send + 'static) -> Input {
        Input(Source::Reader {
            name: name.into(),
            reader: Box::new(reader),
        })
    }

    /// Records framed by the caller, such as messages of a socket.
    pub fn frames(frames: impl Frames + 'static) -> Input {
        Input(Source::Frames(Box::new(frames)))
    }

    /// Whether the caller frames the records ([`Input::frames`]): such frames may go on after
    /// a bad record (see [`Frames::reject`]), so they are decoded as they are framed.
    pub(crate) fn is_framed_by_caller(&self) -> bool {
        matches!(self.0, Source::Frames(_))
    }

    /// The handle to close a live source's connections, for a source that has them.
    pub(crate) fn peer_control(&self) -> Option<PeerControl> {
        match &self.0 {
            Source::Frames(frames) => frames.peer_control(),
            _ => None,
        }
    }

    /// The records of this input. Runs on the reader thread: opening may wait on the input.
    pub(crate) fn open(
        self,
        format: Option<Format>,
        max_record_bytes: usize,
    ) -> Result<Box<dyn Frames>, IngestError> {
        let opener = Opener {
            format,
            max_record_bytes,
        };
        match self.0 {
            Source::Frames(frames) => Ok(frames),
            Source::Reader { name, reader } => opener.stream(name, reader),
            Source::Path(path) if path.is_dir() => {
                let directory =
                    Directory::open(&path, move |file| opener.file(file)).map_err(|error| {
                        IngestError::Read {
                            source_name: path.display().to_string().into(),
                            error,
                        }
                    })?;
                Ok(Box::new(directory))
            }
            Source::Path(path) => opener.file(&path),
        }
    }
}

impl<R: Read + Send + 'static> From<R> for Input {
    /// A reader named `input` in errors.
    fn from(reader: R) -> Input {
        Input::reader("input", reader)
    }
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Source::Path(path) => f.debug_tuple("Path").field(path).finish(),
            Source::Reader { name, .. } => f.debug_tuple("Reader").field(name).finish(),
            Source::Frames(_) => f.write_str("Frames"),
        }
    }
}

/// How each file of an input is opened.
#[derive(Clone, Copy)]
struct Opener {
    format: Option<Format>,
    max_record_bytes: usize,
}

impl Opener {
    fn file(self, path: &Path) -> Result<Box<dyn Frames>, IngestError> {
        let name: Arc<str> = path.display().to_string().into();
        let file = File::open(path).map_err(|error| IngestError::Read {
            source_name: Arc::clone(&name),
            error,
        })?;
        self.stream(name, Box::new(file))
    }

    /// Detects compression and format from the first bytes.
    fn stream(
        self,
        name: Arc<str>,
        reader: Box<dyn Read + Send>,
    ) -> Result<Box<dyn Frames>, IngestError> {
        let read_error = |error| IngestError::Read {
            source_name: Arc::clone(&name),
            error,
        };
        let mut input = BufReader::with_capacity(READ_BUFFER, reader);
        if input
            .fill_buf()
            .map_err(read_error)?
            .starts_with(&GZIP_MAGIC)
        {
            let decoder: Box<dyn Read + Send> = Box::new(MultiGzDecoder::new(input));
            input = BufReader::with_capacity(READ_BUFFER, decoder);
        }
        let detected = Format::detect(input.fill_buf().map_err(read_error)?);
        let reader = Reader::new(input, name);
        Ok(match self.format.unwrap_or(detected) {
            Format::Ndjson => Box::new(Lines::new(reader, self.max_record_bytes)),
            Format::VegaBuffer => Box::new(Records::new(reader, self.max_record_bytes)),
        })
    }
}
