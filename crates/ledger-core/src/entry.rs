//! Ledger entries: one movement of funds between two accounts.

use crate::{AccountType, Amount, AssetId, MarketId, Owner, PartyId, TransferType, VegaTime};

/// One side of a ledger entry: an account of one owner, in one asset, maybe for one market.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Account {
    /// The asset the account holds.
    pub asset: AssetId,
    /// The kind of account.
    pub account_type: AccountType,
    /// Who owns the account.
    pub owner: Owner,
    /// The market of a market-scoped account (margin, bond, …); `None` otherwise.
    pub market: Option<MarketId>,
}

/// One movement of funds from one account to another, as Vega's `LedgerMovements` event
/// reports it, with both accounts' balances after the movement.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct LedgerEntry {
    /// The account the funds leave.
    pub from: Account,
    /// The account the funds enter.
    pub to: Account,
    /// How much moved.
    pub amount: Amount,
    /// Why it moved.
    pub transfer_type: TransferType,
    /// The entry's own timestamp, as the event carries it.
    pub timestamp: VegaTime,
    /// The from-account's balance after the movement.
    pub from_balance: Amount,
    /// The to-account's balance after the movement.
    pub to_balance: Amount,
}

/// What an entry does to one party's holdings.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Effect {
    /// The party owns only the to-account: its holdings grow by the amount.
    Credit,
    /// The party owns only the from-account: its holdings shrink by the amount.
    Debit,
    /// The party owns both accounts: funds move between its own accounts.
    Neutral,
}

/// The position of an entry in the ledger: the total order of every answer.
///
/// The derived ordering compares the fields in declaration order: block time, then block
/// height, then the event's sequence number in the block, then the entry's index in the event.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct EntryKey {
    /// Time of the block that recorded the entry.
    pub vega_time: VegaTime,
    /// Height of that block.
    pub block: u64,
    /// Sequence number of the event within the block.
    pub seq: u64,
    /// Index of the entry within the event.
    pub index: u32,
}

impl LedgerEntry {
    /// The asset that moved: the from-account's.
    ///
    /// A Vega ledger entry always moves a single asset between two accounts of that asset,
    /// so the to-account's asset is the same.
    pub fn asset(&self) -> AssetId {
        self.from.asset
    }

    /// The distinct parties owning either side: none, one or two.
    ///
    /// Network accounts belong to no party, and a party owning both sides is yielded once.
    pub fn parties(&self) -> impl Iterator<Item = PartyId> {
        let from = self.from.owner.party();
        let to = self.to.owner.party().filter(|party| Some(*party) != from);
        from.into_iter().chain(to)
    }

    /// The entry's effect on `party`, or `None` when the party owns neither side.
    pub fn effect_for(&self, party: PartyId) -> Option<Effect> {
        let owns = |account: &Account| account.owner == Owner::Party(party);
        match (owns(&self.from), owns(&self.to)) {
            (false, true) => Some(Effect::Credit),
            (true, false) => Some(Effect::Debit),
            (true, true) => Some(Effect::Neutral),
            (false, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: PartyId = PartyId::from_bytes([0xa1; 32]);
    const BOB: PartyId = PartyId::from_bytes([0xb0; 32]);
    const CAROL: PartyId = PartyId::from_bytes([0xc0; 32]);

    fn entry(from: Owner, to: Owner) -> LedgerEntry {
        let account = |owner| Account {
            asset: AssetId::from_bytes([0x11; 32]),
            account_type: AccountType::General,
            owner,
            market: None,
        };
        LedgerEntry {
            from: account(from),
            to: Account {
                asset: AssetId::from_bytes([0x22; 32]),
                ..account(to)
            },
            amount: "5".parse().unwrap(),
            transfer_type: TransferType::TransferFundsSend,
            timestamp: VegaTime::from_nanos(1),
            from_balance: "0".parse().unwrap(),
            to_balance: "5".parse().unwrap(),
        }
    }

    #[track_caller]
    fn check(from: Owner, to: Owner, party: PartyId, effect: Option<Effect>, parties: &[PartyId]) {
        let entry = entry(from, to);
        assert_eq!(entry.effect_for(party), effect);
        assert_eq!(entry.parties().collect::<Vec<_>>(), parties);
    }

    #[test]
    fn effects_and_parties() {
        use Owner::{Network, Party};
        check(Network, Party(ALICE), ALICE, Some(Effect::Credit), &[ALICE]);
        check(Party(ALICE), Network, ALICE, Some(Effect::Debit), &[ALICE]);
        check(
            Party(ALICE),
            Party(ALICE),
            ALICE,
            Some(Effect::Neutral),
            &[ALICE],
        );
        check(
            Party(ALICE),
            Party(BOB),
            ALICE,
            Some(Effect::Debit),
            &[ALICE, BOB],
        );
        check(
            Party(ALICE),
            Party(BOB),
            BOB,
            Some(Effect::Credit),
            &[ALICE, BOB],
        );
        check(Party(ALICE), Party(BOB), CAROL, None, &[ALICE, BOB]);
        check(Network, Network, ALICE, None, &[]);
        check(Network, Party(BOB), ALICE, None, &[BOB]);
    }

    #[test]
    fn asset_is_the_from_accounts() {
        assert_eq!(
            entry(Owner::Network, Owner::Network).asset(),
            AssetId::from_bytes([0x11; 32])
        );
    }

    #[test]
    fn entry_keys_order_by_time_then_block_then_seq_then_index() {
        let key = |nanos, block, seq, index| EntryKey {
            vega_time: VegaTime::from_nanos(nanos),
            block,
            seq,
            index,
        };
        let mut keys = vec![
            key(2, 0, 0, 0),
            key(1, 9, 0, 0),
            key(1, 8, 5, 0),
            key(1, 8, 4, 7),
            key(1, 8, 4, 6),
            key(-1, 99, 99, 99),
        ];
        keys.sort();
        assert_eq!(
            keys,
            [
                key(-1, 99, 99, 99),
                key(1, 8, 4, 6),
                key(1, 8, 4, 7),
                key(1, 8, 5, 0),
                key(1, 9, 0, 0),
                key(2, 0, 0, 0),
            ]
        );
    }
}
