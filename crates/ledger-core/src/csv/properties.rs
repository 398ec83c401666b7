//! Property tests: any entry's record, read back by the `csv` crate's reader, gives the columns
//! the header names, each computed here independently of the encoder.

use chrono::{DateTime, NaiveDateTime};
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

/// Any time, often on a whole second or a whole number of microseconds, before 1970 too, so
/// that every width of the `vega_time` column comes up.
fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        any::<i32>().prop_map(|seconds| i64::from(seconds) * 1_000_000_000),
        (any::<i32>(), 0i64..1_000_000)
            .prop_map(|(seconds, micros)| i64::from(seconds) * 1_000_000_000 + micros * 1_000),
        (any::<i32>(), 0i64..1_000, 0i64..1_000).prop_map(|(seconds, millis, nanos)| i64::from(
            seconds
        )
            * 1_000_000_000
            + millis * 1_000_000
            + nanos),
    ]
}

/// PostgreSQL's text of a `timestamptz` in UTC, by chrono's formatter: microseconds (floored),
/// the fraction's trailing zeros and a bare dot dropped.
fn postgres_text(nanos: i64) -> String {
    let floored = nanos.div_euclid(1_000) * 1_000;
    let text = DateTime::from_timestamp_nanos(floored)
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string();
    format!("{}+00", text.trim_end_matches('0').trim_end_matches('.'))
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
        vega_time in time(),
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

        let time = postgres_text(vega_time);
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
    fn the_time_column_reads_back_as_the_time_floored_to_the_microsecond(nanos in time()) {
        let column = VegaTimeColumn::new(VegaTime::from_nanos(nanos));
        let text = column.as_str();
        // PostgreSQL's form: `+00` after the time of day, a fraction of one to six digits
        // without trailing zeros, or none and no dot.
        let (time, offset) = text.split_at(text.len() - 3);
        prop_assert_eq!(offset, "+00");
        prop_assert!((22..=29).contains(&text.len()), "{}", text);
        match time.split_once('.') {
            Some((_, fraction)) => prop_assert!(!fraction.ends_with('0'), "{}", text),
            None => prop_assert_eq!(time.len(), 19),
        }
        let parsed = NaiveDateTime::parse_from_str(time, "%Y-%m-%d %H:%M:%S%.f")
            .unwrap()
            .and_utc();
        let floored = nanos.div_euclid(1_000) * 1_000;
        prop_assert_eq!(parsed.timestamp_nanos_opt(), Some(floored));
        prop_assert_eq!(parsed, DateTime::from_timestamp_nanos(floored));
    }

    #[test]
    fn restamping_a_record_equals_encoding_it_at_that_time(
        entry in entry(),
        first in time(),
        second in time(),
        party in party(),
    ) {
        let mut encoder = CsvRowEncoder::new();
        let mut record = encoder.encode(VegaTime::from_nanos(first), &entry, party).to_vec();
        restamp(&mut record, &VegaTimeColumn::new(VegaTime::from_nanos(second)));
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
