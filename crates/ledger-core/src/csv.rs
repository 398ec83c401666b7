//! CSV rows of the ledger export.

use std::fmt;

use crate::time::POSTGRES_MAX_LEN;
use crate::{Effect, Hex, LedgerEntry, PartyId, VegaTime};

/// The export's header line, naming the columns [`CsvRowEncoder::encode`] writes.
pub const CSV_HEADER: &str = "vega_time,quantity,effect,transfer_type,asset_id,account_from_market_id,account_from_party_id,account_from_account_type,account_from_balance,account_to_market_id,account_to_party_id,account_to_account_type,account_to_balance\n";

/// The `vega_time` column of a record, formatted once and written into many with [`restamp`]:
/// the time as Vega's export prints a `timestamptz`, e.g. `2023-03-10 10:24:30.507963+00`
/// (UTC, floored to the microsecond, the fraction's trailing zeros dropped, no fraction when
/// it is zero).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct VegaTimeColumn {
    bytes: [u8; POSTGRES_MAX_LEN],
    /// Between 22 and 29.
    len: u8,
}

impl VegaTimeColumn {
    /// The column of `vega_time`.
    pub fn new(vega_time: VegaTime) -> Self {
        let mut bytes = [0u8; POSTGRES_MAX_LEN];
        let len = vega_time.write_postgres(&mut bytes).len();
        Self {
            bytes,
            // At most POSTGRES_MAX_LEN, 29.
            len: len as u8,
        }
    }

    /// The column's text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).expect("write_postgres writes ASCII")
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for VegaTimeColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("VegaTimeColumn")
            .field(&self.as_str())
            .finish()
    }
}

/// Replaces the `vega_time` column of a record written by [`CsvRowEncoder::encode`] with
/// `column`.
///
/// A record is encoded where its event is parsed, before the time of its block is known, and
/// stamped once it is. The column's width depends on the time (22 to 29 bytes): when the
/// widths are equal, as they are when an entry carries its block's time, the column is
/// overwritten in place; otherwise the rest of the record moves once, a `memmove` of a few
/// hundred bytes (and a reallocation if the record has no spare capacity for a longer column).
/// Blocks share one time, so the caller formats each time once.
///
/// # Panics
///
/// When `record` does not start with a `vega_time` column (no comma within its first 30
/// bytes): it is not a record of [`CsvRowEncoder::encode`].
pub fn restamp(record: &mut Vec<u8>, column: &VegaTimeColumn) {
    let old_len = record
        .iter()
        .take(POSTGRES_MAX_LEN + 1)
        .position(|byte| *byte == b',')
        .expect("a record of CsvRowEncoder::encode starts with its vega_time column");
    let new = column.as_bytes();
    if old_len == new.len() {
        record[..old_len].copy_from_slice(new);
    } else {
        record.splice(..old_len, new.iter().copied());
    }
}

/// Encodes ledger entries as CSV records, one at a time, reusing its buffer.
///
/// Ingest encodes every row once, millions per minute, so the encoder allocates nothing after
/// the first row (ids and times are formatted into stack buffers, the record goes into a buffer
/// that is cleared, not freed) and writes the columns back to back. No column needs quoting
/// under RFC 4180: every value is a validated or generated token (decimal digits, lowercase hex,
/// an enum's name from a fixed table or its decimal code, a time), never a comma, quote or
/// line break, so a general CSV writer's scan of every byte for those would find nothing. The
/// property tests read every record back with the `csv` crate's reader.
#[derive(Default)]
pub struct CsvRowEncoder {
    record: Vec<u8>,
}

impl CsvRowEncoder {
    /// An encoder with an empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Encodes `entry` as seen by `party` and returns the record, ending in `\n`.
    ///
    /// Columns follow [`CSV_HEADER`]: `vega_time` (as [`VegaTimeColumn`]), the amount, the
    /// effect on `party` (the amount for a credit, `-` and the amount for a debit, `0` when
    /// the party owns both sides), the transfer type's full name, the asset id, then for the
    /// from- and the to-account: market id (empty without one), owner (`network` or the party
    /// id), account type without its `ACCOUNT_TYPE_` prefix, and balance.
    ///
    /// An entry `party` owns neither side of is written with effect `0`, like an entry
    /// between its own accounts; Vega's query, which only selects the party's entries, does
    /// the same for any row it would meet. A debit of zero is written `0`, not `-0`, as
    /// PostgreSQL's negation of a zero quantity prints in Vega's export.
    pub fn encode(&mut self, vega_time: VegaTime, entry: &LedgerEntry, party: PartyId) -> &[u8] {
        let mut time_buf = [0u8; POSTGRES_MAX_LEN];
        let time = vega_time.write_postgres(&mut time_buf);
        let amount = entry.amount.as_str();
        let (sign, effect) = match entry.effect_for(party).unwrap_or(Effect::Neutral) {
            Effect::Credit => ("", amount),
            Effect::Debit if entry.amount.is_zero() => ("", "0"),
            Effect::Debit => ("-", amount),
            Effect::Neutral => ("", "0"),
        };
        let asset = entry.asset().hex();
        let from_market = entry.from.market.map(|market| market.hex());
        let from_party = entry.from.owner.party().map(|party| party.hex());
        let to_market = entry.to.market.map(|market| market.hex());
        let to_party = entry.to.owner.party().map(|party| party.hex());
        // Borrowed names: only an unknown code is formatted.
        let transfer_type = entry.transfer_type.name();
        let from_type = entry.from.account_type.short_name();
        let to_type = entry.to.account_type.short_name();
        let columns: [&str; 13] = [
            time,
            amount,
            effect,
            &transfer_type,
            asset.as_str(),
            market_text(from_market.as_ref()),
            owner_text(from_party.as_ref()),
            &from_type,
            entry.from_balance.as_str(),
            market_text(to_market.as_ref()),
            owner_text(to_party.as_ref()),
            &to_type,
            entry.to_balance.as_str(),
        ];
        let record = &mut self.record;
        record.clear();
        for (index, text) in columns.into_iter().enumerate() {
            if index > 0 {
                record.push(b',');
            }
            if index == EFFECT_COLUMN {
                record.extend_from_slice(sign.as_bytes());
            }
            record.extend_from_slice(text.as_bytes());
        }
        record.push(b'\n');
        record
    }
}

/// The `effect` column's place in [`CSV_HEADER`].
const EFFECT_COLUMN: usize = 2;

fn market_text(market: Option<&Hex>) -> &str {
    market.map_or("", Hex::as_str)
}

/// The owner column: the party's hex, or `network` as Vega writes the network owner.
fn owner_text(party: Option<&Hex>) -> &str {
    party.map_or("network", Hex::as_str)
}

impl fmt::Debug for CsvRowEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CsvRowEncoder").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Account, AccountType, AssetId, MarketId, Owner, TransferType};

    const ALICE: &str = "a11ce00000000000000000000000000000000000000000000000000000000001";
    const BOB: &str = "b0b0000000000000000000000000000000000000000000000000000000000002";
    const ASSET: &str = "a55e700000000000000000000000000000000000000000000000000000000003";
    const MARKET: &str = "3a4be70000000000000000000000000000000000000000000000000000000004";
    const MAX: &str =
        "115792089237316195423570985008687907853269984665640564039457584007913129639935";
    /// 2023-07-22T04:26:41.014070079Z, written `2023-07-22 04:26:41.01407+00`.
    const TIME: i64 = 1_690_000_001_014_070_079;

    fn party(hex: &str) -> Owner {
        Owner::Party(hex.parse().unwrap())
    }

    fn account(owner: Owner, account_type: AccountType, market: Option<&str>) -> Account {
        Account {
            asset: ASSET.parse::<AssetId>().unwrap(),
            account_type,
            owner,
            market: market.map(|market| market.parse::<MarketId>().unwrap()),
        }
    }

    fn entry(
        from: Account,
        to: Account,
        amount: &str,
        balances: (&str, &str),
        kind: TransferType,
    ) -> LedgerEntry {
        LedgerEntry {
            from,
            to,
            amount: amount.parse().unwrap(),
            transfer_type: kind,
            // Deliberately not TIME: the vega_time column comes from the argument.
            timestamp: VegaTime::from_nanos(0),
            from_balance: balances.0.parse().unwrap(),
            to_balance: balances.1.parse().unwrap(),
        }
    }

    /// Encodes `entry` for `party` and compares with `expected`, where `<alice>`, `<bob>`,
    /// `<asset>`, `<market>` and `<max>` stand for the constants above.
    #[track_caller]
    fn check(encoder: &mut CsvRowEncoder, entry: &LedgerEntry, party: &str, expected: &str) {
        let expected = expected
            .replace("<alice>", ALICE)
            .replace("<bob>", BOB)
            .replace("<asset>", ASSET)
            .replace("<market>", MARKET)
            .replace("<max>", MAX);
        let row = encoder.encode(VegaTime::from_nanos(TIME), entry, party.parse().unwrap());
        assert_eq!(std::str::from_utf8(row).unwrap(), expected);
    }

    #[test]
    fn rows_match_the_header_columns() {
        use AccountType::{External, General, Insurance, Margin};
        use TransferType::{Deposit, MarginConfiscated, MarginLow, Withdraw};
        let mut encoder = CsvRowEncoder::new();
        let network = Owner::Network;

        let deposit = entry(
            account(network, External, None),
            account(party(ALICE), General, None),
            "100",
            ("0", "100"),
            Deposit,
        );
        check(
            &mut encoder,
            &deposit,
            ALICE,
            "2023-07-22 04:26:41.01407+00,100,100,TRANSFER_TYPE_DEPOSIT,<asset>,,network,EXTERNAL,0,,<alice>,GENERAL,100\n",
        );

        let withdraw = entry(
            account(party(ALICE), General, None),
            account(network, External, None),
            MAX,
            ("0", MAX),
            Withdraw,
        );
        check(
            &mut encoder,
            &withdraw,
            ALICE,
            "2023-07-22 04:26:41.01407+00,<max>,-<max>,TRANSFER_TYPE_WITHDRAW,<asset>,,<alice>,GENERAL,0,,network,EXTERNAL,<max>\n",
        );

        let own_accounts = entry(
            account(party(ALICE), General, None),
            account(party(ALICE), Margin, Some(MARKET)),
            "7",
            ("93", "7"),
            MarginLow,
        );
        check(
            &mut encoder,
            &own_accounts,
            ALICE,
            "2023-07-22 04:26:41.01407+00,7,0,TRANSFER_TYPE_MARGIN_LOW,<asset>,,<alice>,GENERAL,93,<market>,<alice>,MARGIN,7\n",
        );

        let confiscated = entry(
            account(party(BOB), Margin, Some(MARKET)),
            account(network, Insurance, Some(MARKET)),
            "12",
            ("0", "1012"),
            MarginConfiscated,
        );
        check(
            &mut encoder,
            &confiscated,
            BOB,
            "2023-07-22 04:26:41.01407+00,12,-12,TRANSFER_TYPE_MARGIN_CONFISCATED,<asset>,<market>,<bob>,MARGIN,0,<market>,network,INSURANCE,1012\n",
        );
        // A party owning neither side sees no effect.
        check(
            &mut encoder,
            &confiscated,
            ALICE,
            "2023-07-22 04:26:41.01407+00,12,0,TRANSFER_TYPE_MARGIN_CONFISCATED,<asset>,<market>,<bob>,MARGIN,0,<market>,network,INSURANCE,1012\n",
        );
    }

    #[test]
    fn zero_debits_are_written_without_a_sign() {
        let transfer = entry(
            account(party(ALICE), AccountType::General, None),
            account(party(BOB), AccountType::General, None),
            "000",
            ("5", "5"),
            TransferType::TransferFundsSend,
        );
        let mut encoder = CsvRowEncoder::default();
        check(
            &mut encoder,
            &transfer,
            ALICE,
            "2023-07-22 04:26:41.01407+00,0,0,TRANSFER_TYPE_TRANSFER_FUNDS_SEND,<asset>,,<alice>,GENERAL,5,,<bob>,GENERAL,5\n",
        );
        check(
            &mut encoder,
            &transfer,
            BOB,
            "2023-07-22 04:26:41.01407+00,0,0,TRANSFER_TYPE_TRANSFER_FUNDS_SEND,<asset>,,<alice>,GENERAL,5,,<bob>,GENERAL,5\n",
        );
    }

    #[test]
    fn a_shorter_row_after_a_longer_one_leaves_nothing_behind() {
        let long = entry(
            account(party(ALICE), AccountType::Margin, Some(MARKET)),
            account(party(BOB), AccountType::Margin, Some(MARKET)),
            MAX,
            (MAX, MAX),
            TransferType::MtmLoss,
        );
        let short = entry(
            account(Owner::Network, AccountType::External, None),
            account(Owner::Network, AccountType::GlobalReward, None),
            "1",
            ("0", "1"),
            TransferType::Win,
        );
        let mut encoder = CsvRowEncoder::new();
        let long_len = encoder
            .encode(VegaTime::from_nanos(TIME), &long, ALICE.parse().unwrap())
            .len();
        check(
            &mut encoder,
            &short,
            ALICE,
            "2023-07-22 04:26:41.01407+00,1,0,TRANSFER_TYPE_WIN,<asset>,,network,EXTERNAL,0,,network,GLOBAL_REWARD,1\n",
        );
        assert!(long_len > 400);
    }

    #[test]
    fn restamping_replaces_only_the_time_column_whatever_its_width() {
        let deposit = entry(
            account(Owner::Network, AccountType::External, None),
            account(party(ALICE), AccountType::General, None),
            "100",
            ("0", "100"),
            TransferType::Deposit,
        );
        let mut encoder = CsvRowEncoder::new();
        let alice = ALICE.parse().unwrap();
        // Columns of 22 (no fraction), 24, 28 and 29 bytes, to and from each other.
        let times = [
            1_690_000_001_000_000_000,
            1_690_000_001_500_000_999,
            TIME,
            1_690_000_001_014_071_179,
            -1,
            i64::MIN,
        ];
        for placeholder in times {
            for time in times {
                let expected = encoder
                    .encode(VegaTime::from_nanos(time), &deposit, alice)
                    .to_vec();
                let mut record = encoder
                    .encode(VegaTime::from_nanos(placeholder), &deposit, alice)
                    .to_vec();
                restamp(
                    &mut record,
                    &VegaTimeColumn::new(VegaTime::from_nanos(time)),
                );
                assert_eq!(
                    std::str::from_utf8(&record).unwrap(),
                    std::str::from_utf8(&expected).unwrap()
                );
            }
        }
        let column = |nanos| VegaTimeColumn::new(VegaTime::from_nanos(nanos));
        assert_eq!(column(TIME).as_str(), "2023-07-22 04:26:41.01407+00");
        assert_eq!(
            format!("{:?}", column(1_690_000_001_000_000_000)),
            r#"VegaTimeColumn("2023-07-22 04:26:41+00")"#
        );
        assert_eq!(column(TIME), column(TIME + 920));
        assert_ne!(column(TIME), column(TIME + 921));
    }

    #[test]
    fn header_and_rows_have_the_same_columns() {
        assert!(CSV_HEADER.ends_with('\n'));
        assert_eq!(CSV_HEADER.matches(',').count(), 12);
        let row = entry(
            account(Owner::Network, AccountType::External, None),
            account(party(ALICE), AccountType::General, None),
            "1",
            ("0", "1"),
            TransferType::Deposit,
        );
        let mut encoder = CsvRowEncoder::new();
        let record = encoder.encode(VegaTime::from_nanos(-1), &row, ALICE.parse().unwrap());
        let text = std::str::from_utf8(record).unwrap();
        assert_eq!(text.matches(',').count(), 12);
        assert!(text.starts_with("1969-12-31 23:59:59.999999+00,1,1,"));
        assert_eq!(format!("{encoder:?}"), "CsvRowEncoder { .. }");
    }
}
