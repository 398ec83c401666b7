//! Protobuf (one buffer-file record or socket message) → an [`Event`].
//!
//! The top-level fields are scanned by hand first: the id and the type are read, every other
//! field is stepped over by its length, and only the payload of a type the store keeps is then
//! decoded. Most events of a real stream (orders, trades, market data) are of other types, and
//! skipping them costs a scan of a few field headers, not a decode.

use bus_proto::{BusEvent, event_type};
use ledger_core::{AccountType, TransferType};
use oracle_core::{Property, Signer};
use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint};

use super::{Body, Event, parse_id, type_name};
use crate::error::{EventError, RecordError};

/// The `BusEvent` field tags read here.
mod tag {
    pub(super) const ID: u32 = 1;
    pub(super) const BLOCK: u32 = 2;
    pub(super) const TYPE: u32 = 3;
    pub(super) const CHAIN_ID: u32 = 5;
    pub(super) const TIME_UPDATE: u32 = 101;
    pub(super) const LEDGER_MOVEMENTS: u32 = 102;
    pub(super) const ORACLE_DATA: u32 = 127;
    pub(super) const BEGIN_BLOCK: u32 = 148;
    /// Members of the `event` oneof that `bus-proto` declares but the store does not read.
    pub(super) const ACCOUNT: u32 = 105;
    pub(super) const END_BLOCK: u32 = 149;
}

/// Decodes one `BusEvent`.
///
/// An event that only prost can read is re-encoded into `scratch`, which the event borrows.
pub(crate) fn decode<'s>(
    bytes: &'s [u8],
    scratch: &'s mut Vec<u8>,
) -> Result<Event<'s>, RecordError> {
    if let Some(top) = scan(bytes) {
        return top.into_event();
    }
    // The hand scan met something it does not read (a malformed field, a group): prost says
    // what is wrong, or decodes what the scan could not: re-encoded, the declared fields scan.
    *scratch = BusEvent::decode(bytes)
        .map_err(RecordError::Protobuf)?
        .encode_to_vec();
    let plain: &'s [u8] = scratch;
    scan(plain)
        .expect("prost writes only fields the scan reads")
        .into_event()
}

/// The top-level fields of a `BusEvent` that the store needs.
#[derive(Default)]
struct Top<'a> {
    id: Option<&'a str>,
    block: &'a str,
    chain_id: &'a str,
    event_type: i32,
    /// The payload of the `event` member, when the store reads it: its tag and bytes.
    payload: Option<(u32, &'a [u8])>,
    /// Whether an `event` member was seen.
    has_member: bool,
}

/// Reads the id, the type and the payload's place; `None` when the bytes are not simple
/// protobuf.
fn scan(mut buf: &[u8]) -> Option<Top<'_>> {
    let mut top = Top::default();
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        let expected = match tag {
            tag::TYPE => Some(WireType::Varint),
            tag::ID
            | tag::BLOCK
            | tag::CHAIN_ID
            | tag::TIME_UPDATE
            | tag::LEDGER_MOVEMENTS
            | tag::ORACLE_DATA
            | tag::BEGIN_BLOCK => Some(WireType::LengthDelimited),
            _ => None,
        };
        if expected.is_some_and(|expected| expected != wire_type) {
            return None;
        }
        match wire_type {
            WireType::Varint => {
                let value = decode_varint(&mut buf).ok()?;
                if tag == tag::TYPE {
                    // int32 on the wire: the low 32 bits, as protobuf truncates.
                    top.event_type = value as i32;
                }
            }
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                let field = buf.get(..len)?;
                buf = &buf[len..];
                match tag {
                    tag::ID => top.id = Some(std::str::from_utf8(field).ok()?),
                    tag::BLOCK => top.block = std::str::from_utf8(field).ok()?,
                    tag::CHAIN_ID => top.chain_id = std::str::from_utf8(field).ok()?,
                    tag::TIME_UPDATE
                    | tag::LEDGER_MOVEMENTS
                    | tag::ORACLE_DATA
                    | tag::BEGIN_BLOCK
                    | tag::ACCOUNT
                    | tag::END_BLOCK => {
                        // A second member: protobuf merges a member repeated and lets a later
                        // one replace an earlier one, which prost does on the slow path. Vega
                        // writes one member; a scan that kept the last one would drop fields.
                        if top.has_member {
                            return None;
                        }
                        top.has_member = true;
                        if tag != tag::ACCOUNT && tag != tag::END_BLOCK {
                            top.payload = Some((tag, field));
                        }
                    }
                    _ => {}
                }
            }
            WireType::SixtyFourBit => buf = buf.get(8..)?,
            WireType::ThirtyTwoBit => buf = buf.get(4..)?,
            WireType::StartGroup | WireType::EndGroup => return None,
        }
    }
    Some(top)
}

impl<'a> Top<'a> {
    fn into_event(self) -> Result<Event<'a>, RecordError> {
        let id = self
            .id
            .filter(|id| !id.is_empty())
            .ok_or(EventError::MissingId)?;
        let (height, seq) = parse_id(id)?;
        let body = match self.event_type {
            event_type::TIME_UPDATE => {
                let update: bus_proto::TimeUpdate =
                    self.payload(tag::TIME_UPDATE, type_name::TIME_UPDATE, "timeUpdate")?;
                Body::Time(update.timestamp)
            }
            event_type::BEGIN_BLOCK => {
                let begin: bus_proto::BeginBlock =
                    self.payload(tag::BEGIN_BLOCK, type_name::BEGIN_BLOCK, "beginBlock")?;
                Body::Time(begin.timestamp)
            }
            event_type::END_BLOCK => Body::EndBlock,
            event_type::LEDGER_MOVEMENTS => {
                let movements: bus_proto::LedgerMovements = self.payload(
                    tag::LEDGER_MOVEMENTS,
                    type_name::LEDGER_MOVEMENTS,
                    "ledgerMovements",
                )?;
                Body::Ledger(ledger(movements)?)
            }
            event_type::ORACLE_DATA => {
                let event: bus_proto::OracleData =
                    self.payload(tag::ORACLE_DATA, type_name::ORACLE_DATA, "oracleData")?;
                let data = event
                    .external_data
                    .and_then(|external| external.data)
                    .ok_or(EventError::MissingPayload {
                        event_type: type_name::ORACLE_DATA,
                        payload: "oracleData.externalData.data",
                    })?;
                Body::Oracle(oracle(data)?)
            }
            _ => Body::Other,
        };
        Ok(Event {
            height,
            seq,
            block: self.block,
            chain_id: self.chain_id,
            body,
        })
    }

    /// Decodes the payload the event's type names.
    fn payload<M: Message + Default>(
        &self,
        tag: u32,
        event_type: &'static str,
        payload: &'static str,
    ) -> Result<M, RecordError> {
        match self.payload {
            Some((found, bytes)) if found == tag => M::decode(bytes).map_err(RecordError::Protobuf),
            _ => Err(EventError::MissingPayload {
                event_type,
                payload,
            }
            .into()),
        }
    }
}

fn ledger(
    movements: bus_proto::LedgerMovements,
) -> Result<Vec<ledger_core::LedgerEntry>, EventError> {
    movements
        .ledger_movements
        .iter()
        .flat_map(|movement| &movement.entries)
        .enumerate()
        .map(|(index, entry)| {
            let account = |details: &Option<bus_proto::AccountDetails>, field| {
                let details = details
                    .as_ref()
                    .ok_or(EventError::MissingAccount { index, field })?;
                super::RawAccount {
                    asset_id: &details.asset_id,
                    account_type: AccountType::from_wire(details.r#type),
                    owner: details.owner.as_deref(),
                    market_id: details.market_id.as_deref(),
                }
                .into_domain(index, field)
            };
            super::RawEntry {
                from: account(&entry.from_account, "fromAccount")?,
                to: account(&entry.to_account, "toAccount")?,
                amount: &entry.amount,
                transfer_type: TransferType::from_wire(entry.r#type),
                timestamp: entry.timestamp,
                from_balance: non_empty(&entry.from_account_balance),
                to_balance: non_empty(&entry.to_account_balance),
            }
            .into_domain(index)
        })
        .collect()
}

/// Protobuf's way of writing an absent string.
fn non_empty(text: &str) -> Option<&str> {
    Some(text).filter(|text| !text.is_empty())
}

fn oracle(data: bus_proto::Data) -> Result<oracle_core::OracleData, EventError> {
    use bus_proto::signer::Signer as Kind;
    let properties = |list: Vec<bus_proto::Property>| {
        list.into_iter().map(|p| Property {
            name: p.name,
            value: p.value,
        })
    };
    super::RawOracleData {
        signers: data.signers.into_iter().map(|signer| match signer.signer? {
            Kind::PubKey(key) => Some(Signer::PubKey(key.key)),
            Kind::EthAddress(address) => Some(Signer::EthAddress(address.address)),
        }),
        data: properties(data.data),
        meta_data: properties(data.meta_data),
        matched_spec_ids: data.matched_spec_ids.iter().map(String::as_str),
        broadcast_at: data.broadcast_at,
        error: data.error,
    }
    .into_domain()
}

#[cfg(test)]
mod tests {
    use bus_proto::bus_event::Event as Member;
    use bus_proto::{Account, BeginBlock, BusEvent, LedgerMovements, event_type};
    use prost::Message;
    use prost::encoding::{WireType, encode_key, encode_varint};

    use super::{Body, decode};

    fn event(r#type: i32, member: Member) -> Vec<u8> {
        BusEvent {
            id: "7-1".to_owned(),
            r#type,
            event: Some(member),
            ..BusEvent::default()
        }
        .encode_to_vec()
    }

    /// `bytes` with one more length-delimited field.
    fn with_field(mut bytes: Vec<u8>, tag: u32, payload: &[u8]) -> Vec<u8> {
        encode_key(tag, WireType::LengthDelimited, &mut bytes);
        encode_varint(payload.len() as u64, &mut bytes);
        bytes.extend_from_slice(payload);
        bytes
    }

    /// `bytes` decode as prost's canonical encoding of them does.
    #[track_caller]
    fn check_reads_as_prost(bytes: &[u8]) {
        let canonical = BusEvent::decode(bytes).unwrap().encode_to_vec();
        assert_ne!(canonical, bytes, "not a case for the slow path");
        assert_eq!(
            format!("{:?}", decode(bytes, &mut Vec::new())),
            format!("{:?}", decode(&canonical, &mut Vec::new()))
        );
    }

    /// Found by the `bus_event` fuzz target: the scan kept only the last of two `beginBlock`
    /// fields, so the block's time was lost.
    #[test]
    fn repeated_member_merges_as_protobuf_does() {
        let begin = event(
            event_type::BEGIN_BLOCK,
            Member::BeginBlock(BeginBlock {
                timestamp: 5,
                ..BeginBlock::default()
            }),
        );
        let more = BeginBlock {
            height: 7,
            ..BeginBlock::default()
        };
        let bytes = with_field(begin, 148, &more.encode_to_vec());
        check_reads_as_prost(&bytes);
        assert!(matches!(
            decode(&bytes, &mut Vec::new()).unwrap().body,
            Body::Time(5)
        ));
    }

    #[test]
    fn later_member_replaces_the_payload() {
        let ledger = event(
            event_type::LEDGER_MOVEMENTS,
            Member::LedgerMovements(LedgerMovements::default()),
        );
        let bytes = with_field(ledger, 105, &Account::default().encode_to_vec());
        check_reads_as_prost(&bytes);
        assert!(decode(&bytes, &mut Vec::new()).is_err());
    }
}
