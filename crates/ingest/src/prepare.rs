//! Encoding an event's values once, on the reader's (decoder) threads: each ledger entry's CSV rows, each
//! oracle datum's JSON. The work that needs no state beyond the event itself.

use ledger_core::{AssetId, CsvRowEncoder, OracleSpecId, PartyId};

use crate::decode::{Body, Event};

/// An event as the reader hands it over.
pub(crate) struct Prepared {
    pub(crate) height: u64,
    pub(crate) seq: u64,
    pub(crate) item: Item,
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
pub(crate) fn prepare(event: Event, encoder: &mut CsvRowEncoder) -> Prepared {
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
        item,
    }
}
