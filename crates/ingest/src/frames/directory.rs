//! A directory of event files read one after the other, in file-name order, as one stream: a
//! block may go on in the next file, as Vega's core rotates files without regard to blocks.

use std::io;
use std::path::{Path, PathBuf};

use super::{Frames, Step};
use crate::error::{IngestError, Location};

/// Opens one file of the directory as frames of its format.
type OpenFile = Box<dyn FnMut(&Path) -> Result<Box<dyn Frames>, IngestError> + Send>;

/// The files of a directory, one after the other.
pub(crate) struct Directory {
    files: std::vec::IntoIter<PathBuf>,
    current: Option<Box<dyn Frames>>,
    open: OpenFile,
}

impl Directory {
    /// The regular files of `dir` (symbolic links followed), sorted by name, each opened by
    /// `open` when its turn comes.
    pub(crate) fn open(
        dir: &Path,
        open: impl FnMut(&Path) -> Result<Box<dyn Frames>, IngestError> + Send + 'static,
    ) -> io::Result<Self> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_file() {
                files.push(path);
            }
        }
        files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
        Ok(Self {
            files: files.into_iter(),
            current: None,
            open: Box::new(open),
        })
    }
}

impl Frames for Directory {
    fn advance(&mut self) -> Result<Step, IngestError> {
        loop {
            let current = match &mut self.current {
                Some(current) => current,
                None => match self.files.next() {
                    Some(path) => self.current.insert((self.open)(&path)?),
                    None => return Ok(Step::End),
                },
            };
            match current.advance()? {
                Step::End => self.current = None,
                step => return Ok(step),
            }
        }
    }

    fn record(&self) -> &[u8] {
        self.current
            .as_ref()
            .map_or(&[], |current| current.record())
    }

    fn location(&self) -> Location {
        match &self.current {
            Some(current) => current.location(),
            None => Location {
                source: "directory".into(),
                record: 0,
                offset: 0,
                line: None,
            },
        }
    }
}
