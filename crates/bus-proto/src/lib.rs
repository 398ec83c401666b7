//! The subset of Vega's event-bus protobuf messages (`vega.events.v1.BusEvent` and what it
//! carries) that this data node reads, declared by hand from the published wire facts (field
//! tags and types), and the framing of Vega's event buffer files.
//!
//! Protobuf skips fields a message does not declare, so these messages decode real events of
//! any Vega version: members of the `event` oneof other than the ones below, and fields added
//! later, are skipped. Enum fields are kept as their wire numbers (`i32`): naming them is the
//! domain crates' work, and a number this version does not know must reach them intact.
//!
//! Vega's own `.proto` files are AGPL-licensed and are deliberately not vendored: every message
//! here is written from its field tags.
//!
//! Main items: [`BusEvent`] and its [`bus_event::Event`] oneof, the [`event_type`] numbers, and
//! [`buffer`], the length-prefixed record framing of event buffer files.
//!
//! This crate must not do I/O beyond writing to a caller's buffer.

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod buffer;

/// `vega.events.v1.BusEventType` numbers of the events this data node stores or needs.
pub mod event_type {
    /// `BUS_EVENT_TYPE_TIME_UPDATE`.
    pub const TIME_UPDATE: i32 = 2;
    /// `BUS_EVENT_TYPE_LEDGER_MOVEMENTS`.
    pub const LEDGER_MOVEMENTS: i32 = 3;
    /// `BUS_EVENT_TYPE_ACCOUNT`: not stored; the generator mixes such events in as noise.
    pub const ACCOUNT: i32 = 6;
    /// `BUS_EVENT_TYPE_ORACLE_DATA`.
    pub const ORACLE_DATA: i32 = 28;
    /// `BUS_EVENT_TYPE_BEGIN_BLOCK`.
    pub const BEGIN_BLOCK: i32 = 49;
    /// `BUS_EVENT_TYPE_END_BLOCK`.
    pub const END_BLOCK: i32 = 50;
}

/// `vega.events.v1.BusEvent`: one event of the bus.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BusEvent {
    /// `"<block height>-<sequence in block>"`.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The block hash.
    #[prost(string, tag = "2")]
    pub block: String,
    /// The `BusEventType` number (see [`event_type`]).
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    /// The event format version; always 1.
    #[prost(uint32, tag = "4")]
    pub version: u32,
    /// The chain id.
    #[prost(string, tag = "5")]
    pub chain_id: String,
    /// The hash of the transaction that caused the event, if any.
    #[prost(string, tag = "6")]
    pub tx_hash: String,
    /// The payload; `None` for members this crate does not declare.
    #[prost(oneof = "bus_event::Event", tags = "101, 102, 105, 127, 148, 149")]
    pub event: Option<bus_event::Event>,
}

/// Nested types of [`BusEvent`].
pub mod bus_event {
    /// The members of `BusEvent.event` that this crate declares.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Event {
        /// 101: the vega time changed.
        #[prost(message, tag = "101")]
        TimeUpdate(super::TimeUpdate),
        /// 102: ledger movements.
        #[prost(message, tag = "102")]
        LedgerMovements(super::LedgerMovements),
        /// 105: an account changed (`vega.Account`); not stored.
        #[prost(message, tag = "105")]
        Account(super::Account),
        /// 127: oracle data.
        #[prost(message, tag = "127")]
        OracleData(super::OracleData),
        /// 148: a block begins.
        #[prost(message, tag = "148")]
        BeginBlock(super::BeginBlock),
        /// 149: a block ends.
        #[prost(message, tag = "149")]
        EndBlock(super::EndBlock),
    }
}

/// `vega.events.v1.TimeUpdate`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeUpdate {
    /// The new vega time, Unix nanoseconds.
    #[prost(int64, tag = "1")]
    pub timestamp: i64,
}

/// `vega.events.v1.BeginBlock`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BeginBlock {
    /// Block height.
    #[prost(uint64, tag = "1")]
    pub height: u64,
    /// The block's time, Unix nanoseconds.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
    /// The block hash.
    #[prost(string, tag = "3")]
    pub hash: String,
}

/// `vega.events.v1.EndBlock`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EndBlock {
    /// Block height.
    #[prost(uint64, tag = "1")]
    pub height: u64,
}

/// `vega.events.v1.LedgerMovements`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LedgerMovements {
    /// The movements, in order.
    #[prost(message, repeated, tag = "1")]
    pub ledger_movements: Vec<LedgerMovement>,
}

/// `vega.LedgerMovement`: the entries of one transfer request and the balances after it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LedgerMovement {
    /// The entries, in order.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<LedgerEntry>,
    /// Balances after the movement.
    #[prost(message, repeated, tag = "2")]
    pub balances: Vec<PostTransferBalance>,
}

/// `vega.PostTransferBalance`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PostTransferBalance {
    /// The account.
    #[prost(message, optional, tag = "1")]
    pub account: Option<AccountDetails>,
    /// Its balance, an unsigned decimal integer.
    #[prost(string, tag = "2")]
    pub balance: String,
}

/// `vega.LedgerEntry`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LedgerEntry {
    /// The debited account.
    #[prost(message, optional, tag = "1")]
    pub from_account: Option<AccountDetails>,
    /// The credited account.
    #[prost(message, optional, tag = "2")]
    pub to_account: Option<AccountDetails>,
    /// The amount, an unsigned decimal integer.
    #[prost(string, tag = "3")]
    pub amount: String,
    /// The `vega.TransferType` number.
    #[prost(int32, tag = "4")]
    pub r#type: i32,
    /// Unix nanoseconds.
    #[prost(int64, tag = "5")]
    pub timestamp: i64,
    /// The debited account's balance after the entry.
    #[prost(string, tag = "6")]
    pub from_account_balance: String,
    /// The credited account's balance after the entry.
    #[prost(string, tag = "7")]
    pub to_account_balance: String,
    /// The transfer the entry belongs to, if any.
    #[prost(string, optional, tag = "8")]
    pub transfer_id: Option<String>,
}

/// `vega.AccountDetails`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AccountDetails {
    /// The asset id, 64 hex digits.
    #[prost(string, tag = "1")]
    pub asset_id: String,
    /// The `vega.AccountType` number.
    #[prost(int32, tag = "2")]
    pub r#type: i32,
    /// The owning party; absent for network accounts.
    #[prost(string, optional, tag = "3")]
    pub owner: Option<String>,
    /// The market, for market accounts.
    #[prost(string, optional, tag = "4")]
    pub market_id: Option<String>,
}

/// `vega.Account`, the payload of ACCOUNT events (read only to be skipped; written by the
/// generator as the kind of event a real stream is mostly made of).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Account {
    /// Account id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Owning party.
    #[prost(string, tag = "2")]
    pub owner: String,
    /// Balance, an unsigned decimal integer.
    #[prost(string, tag = "3")]
    pub balance: String,
    /// Asset id.
    #[prost(string, tag = "4")]
    pub asset: String,
    /// Market id.
    #[prost(string, tag = "5")]
    pub market_id: String,
    /// The `vega.AccountType` number.
    #[prost(int32, tag = "6")]
    pub r#type: i32,
}

/// `vega.OracleData` as carried by ORACLE_DATA events.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OracleData {
    /// The datum.
    #[prost(message, optional, tag = "1")]
    pub external_data: Option<ExternalData>,
}

/// `vega.ExternalData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExternalData {
    /// The datum.
    #[prost(message, optional, tag = "1")]
    pub data: Option<Data>,
}

/// `vega.Data`: one oracle datum.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Data {
    /// Who signed it.
    #[prost(message, repeated, tag = "1")]
    pub signers: Vec<Signer>,
    /// The properties, in order.
    #[prost(message, repeated, tag = "2")]
    pub data: Vec<Property>,
    /// The specs it matched, in order.
    #[prost(string, repeated, tag = "3")]
    pub matched_spec_ids: Vec<String>,
    /// When it was broadcast, Unix nanoseconds.
    #[prost(int64, tag = "4")]
    pub broadcast_at: i64,
    /// Metadata properties.
    #[prost(message, repeated, tag = "5")]
    pub meta_data: Vec<Property>,
    /// Why it was rejected, if it was.
    #[prost(string, optional, tag = "6")]
    pub error: Option<String>,
}

/// `vega.data.v1.Signer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Signer {
    /// The signer; `None` for a kind this crate does not declare.
    #[prost(oneof = "signer::Signer", tags = "1, 2")]
    pub signer: Option<signer::Signer>,
}

/// Nested types of [`Signer`](struct@Signer).
pub mod signer {
    /// The kinds of signer.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Signer {
        /// 1: a Vega public key.
        #[prost(message, tag = "1")]
        PubKey(super::PubKey),
        /// 2: an Ethereum address.
        #[prost(message, tag = "2")]
        EthAddress(super::EthAddress),
    }
}

/// `vega.data.v1.PubKey`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PubKey {
    /// The key, hex.
    #[prost(string, tag = "1")]
    pub key: String,
}

/// `vega.data.v1.ETHAddress`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EthAddress {
    /// The address, `0x`-prefixed hex.
    #[prost(string, tag = "1")]
    pub address: String,
}

/// `vega.data.v1.Property`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Property {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// Bytes written by hand from the wire rules: a decoder of the real messages must read
    /// exactly these fields at these tags.
    #[test]
    fn end_block_event_decodes_from_hand_written_bytes() {
        let bytes = [
            0x0a, 0x03, b'7', b'-', b'3', // 1: id "7-3"
            0x18, 50, // 3: type END_BLOCK
            0x20, 1, // 4: version 1
            0xaa, 0x09, 0x02, 0x08, 7, // 149 (length-delimited): EndBlock { 1: height 7 }
        ];
        let event = BusEvent::decode(&bytes[..]).unwrap();
        assert_eq!(event.id, "7-3");
        assert_eq!(event.r#type, event_type::END_BLOCK);
        assert_eq!(event.version, 1);
        assert_eq!(
            event.event,
            Some(bus_event::Event::EndBlock(EndBlock { height: 7 }))
        );
    }

    #[test]
    fn undeclared_members_and_fields_are_skipped() {
        let bytes = [
            0x0a, 0x03, b'1', b'-', b'0', // 1: id
            0x18, 4, // 3: type (an order event)
            0xc2, 0x06, 0x02, 0x08, 0x01, // 104 (length-delimited): a member not declared
            0xf8, 0x3e, 0x05, // 999 (varint): a field not declared
        ];
        let event = BusEvent::decode(&bytes[..]).unwrap();
        assert_eq!(event.id, "1-0");
        assert_eq!(event.r#type, 4);
        assert_eq!(event.event, None);
    }
}
