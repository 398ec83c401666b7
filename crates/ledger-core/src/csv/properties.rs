//! Property tests: any entry's record, read back by the `csv` crate's reader, gives the columns
//! the header names, each computed here independently of the encoder.

use chrono::DateTime;
use proptest::prelude::*;

use super::*;
use crate::{Account, AccountType, Amount, AssetId, MarketId, Owner, TransferType};

/// Ids from a pool of three, so that owners and the reading party often coincide.
fn party() -> impl Strategy<Value = PartyId> {
    (1u8..=3).prop_map(|byte| PartyId::from_bytes([byte; 32]))
}

fn owner() -> impl Strategy<Value = Owner> {
    prop_oneof![Just(Owner::Network), party().prop_map(Owner::Party)]
}

/// Any valid amount, with leading zeros sometimes, up to 2^256 − 1.
fn amount() -> impl Strategy<Value = Amount> {
    "[0-9]{1,78}".prop_filter_map("beyond 2^256 - 1", |text| text.parse().ok())
}

fn account() -> impl Strategy<Value = Account> {
    (
        any::<[u8; 32]>(),
        prop::sample::select(AccountType::ALL),
        owner(),
        prop::option::of(any::<[u8; 32]>()),
    )
        .prop_map(|(asset, account_type, owner, market)| Account {
            asset: AssetId::from_bytes(asset),
            account_type,
            owner,
            market: market.map(MarketId::from_bytes),
        })
}

fn entry() -> impl Strategy<Value = LedgerEntry> {
    (
        account(),
        account(),
        amount(),
        prop::sample::select(TransferType::ALL),
        any::<i64>(),
        amount(),
        amount(),
    )
        .prop_map(
            |(from, to, amount, transfer_type, timestamp, from_balance, to_balance)| LedgerEntry {
                from,
                to,
                amount,
                transfer_type,
                timestamp: VegaTime::from_nanos(timestamp),
                from_balance,
                to_balance,
            },
        )
}

/// The owner column as Vega writes it.
fn owner_column(owner: Owner) -> String {
    match owner {
        Owner::Network => "network".to_owned(),
        Owner::Party(party) => party.to_string(),
    }
}

/// The effect column, from who owns which side.
fn effect_column(entry: &LedgerEntry, party: PartyId) -> String {
    let owns = |account: &Account| account.owner == Owner::Party(party);
    match (owns(&entry.from), owns(&entry.to)) {
        (false, true) => entry.amount.to_string(),
        (true, false) if !entry.amount.is_zero() => format!("-{}", entry.amount),
        _ => "0".to_owned(),
    }
}

proptest! {
    #[test]
    fn records_read_back_as_the_header_columns(
        entry in entry(),
        vega_time in any::<i64>(),
        party in party(),
    ) {
        let mut encoder = CsvRowEncoder::new();
        let record = encoder.encode(VegaTime::from_nanos(vega_time), &entry, party).to_vec();
        prop_assert_eq!(record.last(), Some(&b'\n'));

        let mut text = CSV_HEADER.as_bytes().to_vec();
        text.extend_from_slice(&record);
        let mut reader = ::csv::Reader::from_reader(text.as_slice());
        let header = reader.headers().unwrap().clone();
        let rows = reader.records().collect::<Result<Vec<_>, _>>().unwrap();
        prop_assert_eq!(rows.len(), 1);
        let row = &rows[0];
        prop_assert_eq!(row.len(), header.len());

        let time = DateTime::from_timestamp_nanos(vega_time)
            .format("%Y-%m-%dT%H:%M:%S%.9fZ")
            .to_string();
        let market = |market: Option<MarketId>| market.map_or_else(String::new, |m| m.to_string());
        let expected = [
            ("vega_time", time),
            ("quantity", entry.amount.to_string()),
            ("effect", effect_column(&entry, party)),
            ("transfer_type", entry.transfer_type.name().into_owned()),
            ("asset_id", entry.from.asset.to_string()),
            ("account_from_market_id", market(entry.from.market)),
            ("account_from_party_id", owner_column(entry.from.owner)),
            ("account_from_account_type", entry.from.account_type.short_name().into_owned()),
            ("account_from_balance", entry.from_balance.to_string()),
            ("account_to_market_id", market(entry.to.market)),
            ("account_to_party_id", owner_column(entry.to.owner)),
            ("account_to_account_type", entry.to.account_type.short_name().into_owned()),
            ("account_to_balance", entry.to_balance.to_string()),
        ];
        for ((name, value), (column, field)) in expected.iter().zip(header.iter().zip(row)) {
            prop_assert_eq!(*name, column);
            prop_assert_eq!(value.as_str(), field, "column {}", name);
        }
    }

    #[test]
    fn restamping_a_record_equals_encoding_it_at_that_time(
        entry in entry(),
        first in any::<i64>(),
        second in any::<i64>(),
        party in party(),
    ) {
        let mut encoder = CsvRowEncoder::new();
        let mut record = encoder.encode(VegaTime::from_nanos(first), &entry, party).to_vec();
        restamp(&mut record, &vega_time_column(VegaTime::from_nanos(second)));
        prop_assert_eq!(record, encoder.encode(VegaTime::from_nanos(second), &entry, party));
    }

    #[test]
    fn amounts_parse_digit_strings_only_and_drop_leading_zeros(text in "\\PC{0,80}|[0-9]{1,80}") {
        match text.parse::<Amount>() {
            Ok(amount) => {
                prop_assert!(text.bytes().all(|byte| byte.is_ascii_digit()));
                let digits = amount.as_str();
                prop_assert!(digits == "0" || !digits.starts_with('0'));
                prop_assert_eq!(digits, match text.trim_start_matches('0') {
                    "" => "0",
                    rest => rest,
                });
            }
            Err(err) => prop_assert_eq!(err, crate::Error::InvalidAmount(text)),
        }
    }
}
