//! The writer thread: writes batches through the store's [`IngestWriter`] while the next one
//! is assembled, and answers the assembler's questions about stored blocks in order.

use std::sync::mpsc::{Receiver, SyncSender};

use storage::backend::Then;
use storage::{BlockRecord, IngestBatch, IngestWriter};

use crate::{IngestError, IngestStats};

/// How many batches the assembler may have sent that the writer has not written yet. A
/// transaction's commit costs much more than the batches staged in it (it writes their held
/// segments, and SQLite the pages they dirtied): with one, the assembler and the decoders
/// stalled through every commit and a 16× ingest ran about a tenth slower; with two it keeps
/// filling a batch meanwhile (docs/PERFORMANCE.md, "Transactions of staged batches").
pub(crate) const IN_FLIGHT: usize = 2;

/// A request to the writer thread, answered in order by a [`Done`].
pub(crate) enum Job {
    /// Write the batch, then commit the transaction (with what is staged in it) or keep it
    /// open.
    Write { batch: IngestBatch, then: Then },
    /// The blocks stored at a height.
    Blocks(u64),
}

/// The writer thread's answer to a [`Job`]; a written batch comes back as it was, for the
/// assembler to empty and reuse.
pub(crate) enum Done {
    Written(Result<IngestBatch, storage::Error>),
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
            Job::Write { batch, then } => {
                let written = match then {
                    Then::Commit => writer.commit(&batch),
                    Then::KeepOpen => writer.stage(&batch),
                };
                Done::Written(written.map(|()| batch))
            }
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
    /// The counters of each batch sent and not yet written, oldest first, and whether its
    /// write commits.
    pub(crate) in_flight: std::collections::VecDeque<(IngestStats, Then)>,
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
