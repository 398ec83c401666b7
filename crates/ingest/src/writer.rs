//! The writer thread: commits batches through the store's [`IngestWriter`] while the next one
//! is assembled, and answers the assembler's questions about stored blocks in order.

use std::sync::mpsc::{Receiver, SyncSender};

use storage::{BlockRecord, IngestBatch, IngestWriter};

use crate::{IngestError, IngestStats};

/// A request to the writer thread, answered in order by a [`Done`].
pub(crate) enum Job {
    Commit(IngestBatch),
    /// The blocks stored at a height.
    Blocks(u64),
}

/// The writer thread's answer to a [`Job`]; a committed batch comes back as it was, for
/// the assembler to empty and reuse.
pub(crate) enum Done {
    Committed(Result<IngestBatch, storage::Error>),
    Blocks(Result<Vec<BlockRecord>, storage::Error>),
}

pub(crate) fn write_jobs(
    writer: &mut dyn IngestWriter,
    jobs: &Receiver<Job>,
    done: &SyncSender<Done>,
) {
    for job in jobs {
        let answer = match job {
            // The batch goes back whole, rows and all: freeing them is the assembler's work,
            // since this thread is the ingest's bottleneck.
            Job::Commit(batch) => Done::Committed(writer.commit(&batch).map(|()| batch)),
            Job::Blocks(height) => Done::Blocks(writer.blocks(height)),
        };
        if done.send(answer).is_err() {
            return;
        }
    }
}

/// The assembler's end of the writer thread.
pub(crate) struct StoreHandle {
    pub(crate) jobs: SyncSender<Job>,
    pub(crate) done: Receiver<Done>,
    /// The counters of the batch being committed, absorbed once it is.
    pub(crate) in_flight: Option<IngestStats>,
}

impl StoreHandle {
    pub(crate) fn send(&self, job: Job) -> Result<(), IngestError> {
        self.jobs.send(job).map_err(|_| writer_gone())
    }

    pub(crate) fn answer(&self) -> Result<Done, IngestError> {
        self.done.recv().map_err(|_| writer_gone())
    }
}

/// The writer thread only stops early by panicking, which the thread scope re-raises; this
/// error is what the assembler sees meanwhile.
fn writer_gone() -> IngestError {
    IngestError::WriterGone
}
