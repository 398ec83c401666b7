//! Encoding an event's values once, on the reader's (decoder) threads: each ledger entry's CSV rows, each
//! oracle datum's JSON. The work that needs no state beyond the event itself.

use std::sync::Arc;

use ledger_core::{AssetId, CsvRowEncoder, OracleSpecId, PartyId};

use crate::decode::{Body, Event, json, proto};
use crate::error::RecordError;
use crate::frames::Encoding;

/// An event as the reader hands it over.
pub(crate) struct Prepared {
    pub(crate) height: u64,
    pub(crate) seq: u64,
    /// The block and chain the event names.
    pub(crate) label: Label,
    pub(crate) item: Item,
}

/// The block hash and the chain id an event carries (`None`: the stream has none). Every event
/// of a block carries the same two strings, so they are shared, not copied per event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Label {
    pub(crate) block: Option<Arc<str>>,
    pub(crate) chain_id: Option<Arc<str>>,
}

/// A decoder thread's state: the CSV encoder and its buffers, reused from event to event.
#[derive(Default)]
pub(crate) struct Preparer {
    encoder: CsvRowEncoder,
    json: json::Scratch,
    proto: Vec<u8>,
    /// The last label made, shared by the next events that carry the same strings.
    label: Label,
}

impl Preparer {
    /// Decodes one record and encodes its values.
    pub(crate) fn prepare(
        &mut self,
        encoding: Encoding,
        record: &[u8],
    ) -> Result<Prepared, RecordError> {
        let event = match encoding {
            Encoding::Json => json::decode(record, &mut self.json)?,
            Encoding::Protobuf => proto::decode(record, &mut self.proto)?,
        };
        let label = Label {
            block: share(&mut self.label.block, event.block),
            chain_id: share(&mut self.label.chain_id, event.chain_id),
        };
        Ok(prepare(event, label, &mut self.encoder))
    }
}

/// `text` as a shared string: the one in `last` when it holds the same text, else a new one,
/// which `last` then keeps. `None` for an empty text.
fn share(last: &mut Option<Arc<str>>, text: &str) -> Option<Arc<str>> {
    if text.is_empty() {
        return None;
    }
    match last {
        Some(shared) if **shared == *text => Some(Arc::clone(shared)),
        _ => {
            let shared: Arc<str> = Arc::from(text);
            *last = Some(Arc::clone(&shared));
            Some(shared)
        }
    }
}

/// What an event carries, its values already in the form the store keeps.
pub(crate) enum Item {
    /// The vega time changes (time update or begin block).
    Time(i64),
    /// The block ends.
    EndBlock,
    /// A ledger movement event: how many entries it had, and their rows.
    Ledger {
        entries: u64,
        rows: Vec<PreparedRow>,
    },
    /// One oracle datum.
    Oracle {
        json: Vec<u8>,
        matched_specs: Vec<OracleSpecId>,
        broadcast_at: i64,
    },
    /// Any other event type: it only advances the block's sequence.
    Other,
}

/// One export row, encoded with the entry's own timestamp in its `vega_time` column, which the
/// assembler overwrites once it knows the block's time.
pub(crate) struct PreparedRow {
    pub(crate) party: PartyId,
    pub(crate) asset: AssetId,
    pub(crate) index: u32,
    pub(crate) timestamp: i64,
    pub(crate) csv_line: Vec<u8>,
}

/// Encodes an event's values: the work that needs no state beyond the event itself.
fn prepare(event: Event<'_>, label: Label, encoder: &mut CsvRowEncoder) -> Prepared {
    let item = match event.body {
        Body::Time(time) => Item::Time(time),
        Body::EndBlock => Item::EndBlock,
        Body::Other => Item::Other,
        Body::Ledger(entries) => {
            let mut rows = Vec::with_capacity(entries.len() * 2);
            for (index, entry) in entries.iter().enumerate() {
                for party in entry.parties() {
                    rows.push(PreparedRow {
                        party,
                        asset: entry.asset(),
                        index: index as u32,
                        timestamp: entry.timestamp.nanos(),
                        csv_line: encoder.encode(entry.timestamp, entry, party).to_vec(),
                    });
                }
            }
            Item::Ledger {
                entries: entries.len() as u64,
                rows,
            }
        }
        Body::Oracle(datum) => Item::Oracle {
            json: datum.to_vega_json(),
            broadcast_at: datum.broadcast_at,
            matched_specs: datum.matched_spec_ids,
        },
    };
    Prepared {
        height: event.height,
        seq: event.seq,
        label,
        item,
    }
}
