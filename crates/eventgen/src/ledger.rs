//! The simulated ledger: account balances and the transfers that move them.
//!
//! Every entry is applied to the balances before it is written, so the emitted
//! `fromAccountBalance` / `toAccountBalance` are what a replay of the stream computes, and no
//! account other than EXTERNAL (the outside world) ever pays more than it holds.

use rand::Rng;

use super::GenerateConfig;
use super::accounts::{Account, Entry, TransferType};
use super::scenario::{Scenario, Wish, deposit_amount};

/// Balances of every account the generator can touch, in one flat vector indexed by
/// party/asset/market: the hot loop does no hashing and memory depends only on the sizes.
pub(super) struct Ledger {
    n_parties: u32,
    n_assets: u32,
    n_markets: u32,
    whale_share: f64,
    /// GENERAL by (party, asset), then MARGIN by (party, market), then FEES_MAKER,
    /// SETTLEMENT and INSURANCE by market, then FEES_INFRASTRUCTURE and GLOBAL_REWARD by asset.
    balances: Vec<u128>,
    /// Whether the next entry must be a deposit (see [`Ledger::deposit_next`]).
    deposit_next: bool,
}

impl Ledger {
    pub(super) fn new(config: &GenerateConfig) -> Ledger {
        let parties = config.parties as usize;
        let markets = config.markets as usize;
        let assets = config.assets as usize;
        Ledger {
            n_parties: config.parties,
            n_assets: config.assets,
            n_markets: config.markets,
            whale_share: config.whale_share,
            balances: vec![0; parties * (assets + markets) + 3 * markets + 2 * assets],
            deposit_next: false,
        }
    }

    /// Makes the next entry of [`Ledger::next_entry`] a deposit, whatever the draw.
    pub(super) fn deposit_next(&mut self) {
        self.deposit_next = true;
    }

    /// Applies and returns a deposit (of an amount drawn as other deposits are) into `party`'s general account in
    /// `asset`, as the genesis block funds every account.
    pub(super) fn genesis_deposit(&mut self, party: u32, asset: u32, rng: &mut impl Rng) -> Entry {
        let planned = Planned {
            from: Account::External { asset },
            to: Account::General { party, asset },
            amount: deposit_amount(rng).draw_unbounded(rng),
            transfer_type: TransferType::Deposit,
            always_transfer_id: false,
        };
        self.apply(planned, rng)
    }

    /// The settlement asset of a market.
    pub(super) fn market_asset(&self, market: u32) -> u32 {
        market % self.n_assets
    }

    /// The asset an account holds.
    pub(super) fn asset_of(&self, account: Account) -> u32 {
        match account {
            Account::External { asset }
            | Account::General { asset, .. }
            | Account::FeesInfrastructure { asset }
            | Account::GlobalReward { asset } => asset,
            Account::Margin { market, .. }
            | Account::FeesMaker { market }
            | Account::Settlement { market }
            | Account::Insurance { market } => self.market_asset(market),
        }
    }

    /// Where an account's balance lives; `None` for EXTERNAL, which has no tracked balance.
    fn index(&self, account: Account) -> Option<usize> {
        let parties = self.n_parties as usize;
        let assets = self.n_assets as usize;
        let markets = self.n_markets as usize;
        let margin_start = parties * assets;
        let market_start = margin_start + parties * markets;
        let asset_start = market_start + 3 * markets;
        let index = match account {
            Account::External { .. } => return None,
            Account::General { party, asset } => party as usize * assets + asset as usize,
            Account::Margin { party, market } => {
                margin_start + party as usize * markets + market as usize
            }
            Account::FeesMaker { market } => market_start + market as usize,
            Account::Settlement { market } => market_start + markets + market as usize,
            Account::Insurance { market } => market_start + 2 * markets + market as usize,
            Account::FeesInfrastructure { asset } => asset_start + asset as usize,
            Account::GlobalReward { asset } => asset_start + assets + asset as usize,
        };
        Some(index)
    }

    /// The current balance (0 for EXTERNAL, as Vega shows it).
    pub(super) fn balance(&self, account: Account) -> u128 {
        self.index(account).map_or(0, |index| self.balances[index])
    }

    /// Draws the next entry, applies it and returns it with the balances after the move.
    pub(super) fn next_entry(&mut self, rng: &mut impl Rng) -> Entry {
        let whale = self.whale_share > 0.0 && rng.random_bool(self.whale_share);
        let primary = if whale { 0 } else { self.ordinary_party(rng) };
        let mut scenario = Scenario::pick(rng);
        if std::mem::take(&mut self.deposit_next) {
            scenario = Scenario::Deposit;
        }
        loop {
            if whale && scenario.involves_no_party() {
                scenario = Scenario::Deposit;
            }
            match self.plan(scenario, primary, rng) {
                Some(planned) => return self.apply(planned, rng),
                None => scenario = scenario.fallback(),
            }
        }
    }

    /// A party that is not the whale, unless whales are off or there is nobody else.
    fn ordinary_party(&self, rng: &mut impl Rng) -> u32 {
        if self.whale_share > 0.0 && self.n_parties > 1 {
            rng.random_range(1..self.n_parties)
        } else {
            rng.random_range(0..self.n_parties)
        }
    }

    /// A party other than `primary`, preferring non-whales so whale_share stays accurate.
    fn counterparty(&self, primary: u32, rng: &mut impl Rng) -> u32 {
        let first = if self.whale_share > 0.0 && self.n_parties > 2 {
            1
        } else {
            0
        };
        if primary < first {
            return rng.random_range(first..self.n_parties);
        }
        // Drawing from one fewer candidate and skipping over `primary` keeps the draw uniform.
        let candidate = rng.random_range(first..self.n_parties - 1);
        if candidate >= primary {
            candidate + 1
        } else {
            candidate
        }
    }
}

/// A transfer chosen but not yet applied.
struct Planned {
    from: Account,
    to: Account,
    amount: u128,
    transfer_type: TransferType,
    always_transfer_id: bool,
}

impl Ledger {
    /// Chooses accounts and an amount for `scenario`; `None` when the payer is empty.
    fn plan(&mut self, scenario: Scenario, primary: u32, rng: &mut impl Rng) -> Option<Planned> {
        let asset = rng.random_range(0..self.n_assets);
        let market = rng.random_range(0..self.n_markets);
        let market_asset = self.market_asset(market);
        let general = Account::General {
            party: primary,
            asset,
        };
        let market_general = Account::General {
            party: primary,
            asset: market_asset,
        };
        let margin = Account::Margin {
            party: primary,
            market,
        };
        let other = self.counterparty(primary, rng);
        use Scenario as S;
        use TransferType as T;
        let (from, to, transfer_type, wish) = match scenario {
            S::Deposit => {
                let external = Account::External { asset };
                (external, general, T::Deposit, deposit_amount(rng))
            }
            S::Withdraw => {
                let to = Account::External { asset };
                // Now and then a party empties most of its account, huge or not, so that
                // amounts past 64 bits also leave the ledger.
                let wish = if rng.random_ratio(1, 10) {
                    Wish::Sweep
                } else {
                    Wish::Fraction(1, 4)
                };
                (general, to, T::Withdraw, wish)
            }
            S::MarginLow => (market_general, margin, T::MarginLow, Wish::Fraction(2, 6)),
            S::MarginHigh => (margin, market_general, T::MarginHigh, Wish::Fraction(0, 2)),
            S::MakerFeePay => {
                let to = Account::FeesMaker { market };
                (
                    market_general,
                    to,
                    T::MakerFeePay,
                    Wish::Range(10_000, 10_000_000),
                )
            }
            S::MakerFeeReceive => {
                let from = Account::FeesMaker { market };
                (
                    from,
                    market_general,
                    T::MakerFeeReceive,
                    Wish::Fraction(0, 1),
                )
            }
            S::InfrastructureFeePay => {
                let to = Account::FeesInfrastructure { asset };
                (
                    general,
                    to,
                    T::InfrastructureFeePay,
                    Wish::Range(10_000, 1_000_000),
                )
            }
            S::TransferSend => {
                // Parties also fund the reward and insurance pools, as Vega allows.
                let (from, to) = match rng.random_range(0..10) {
                    0..7 => (
                        general,
                        Account::General {
                            party: other,
                            asset,
                        },
                    ),
                    7..9 => (general, Account::GlobalReward { asset }),
                    _ => (market_general, Account::Insurance { market }),
                };
                (from, to, T::TransferFundsSend, Wish::Fraction(3, 8))
            }
            S::TransferDistribute => {
                let to = Account::General {
                    party: other,
                    asset,
                };
                (
                    general,
                    to,
                    T::TransferFundsDistribute,
                    Wish::Fraction(3, 8),
                )
            }
            S::RewardPayout => {
                let from = Account::GlobalReward { asset };
                (from, general, T::RewardPayout, Wish::Fraction(2, 6))
            }
            S::FundReward => {
                let (from, to) = (Account::External { asset }, Account::GlobalReward { asset });
                (
                    from,
                    to,
                    T::Deposit,
                    Wish::Range(1_000_000_000, 100_000_000_000),
                )
            }
            S::MtmLoss => {
                let to = Account::Settlement { market };
                (margin, to, T::MtmLoss, Wish::Fraction(1, 4))
            }
            S::MtmWin => {
                let from = Account::Settlement { market };
                (from, margin, T::MtmWin, Wish::Fraction(0, 2))
            }
            S::NetworkTransfer => {
                let from = if rng.random_bool(0.5) {
                    Account::FeesInfrastructure {
                        asset: market_asset,
                    }
                } else {
                    Account::Insurance { market }
                };
                let to = Account::GlobalReward {
                    asset: market_asset,
                };
                (from, to, T::TransferFundsDistribute, Wish::Fraction(0, 2))
            }
        };
        let amount = match self.index(from).map(|index| self.balances[index]) {
            None => wish.draw_unbounded(rng),
            Some(0) => return None,
            Some(available) => wish.draw_bounded(available, rng),
        };
        let always_transfer_id = matches!(
            scenario,
            S::TransferSend | S::TransferDistribute | S::NetworkTransfer
        );
        Some(Planned {
            from,
            to,
            amount,
            transfer_type,
            always_transfer_id,
        })
    }

    fn apply(&mut self, planned: Planned, rng: &mut impl Rng) -> Entry {
        let Planned {
            from,
            to,
            amount,
            transfer_type,
            always_transfer_id,
        } = planned;
        debug_assert_ne!(from, to, "a transfer needs two accounts");
        if let Some(index) = self.index(from) {
            // `plan` never asks for more than the balance, so this cannot underflow.
            self.balances[index] -= amount;
        }
        if let Some(index) = self.index(to) {
            // Saturation is unreachable in practice (u128 holds 10^38 while huge deposits are
            // below 10^24) and keeps a pathological run from panicking.
            self.balances[index] = self.balances[index].saturating_add(amount);
        }
        Entry {
            from,
            to,
            amount,
            transfer_type,
            from_balance: self.balance(from),
            to_balance: self.balance(to),
            has_transfer_id: always_transfer_id || rng.random_ratio(1, 5),
        }
    }
}
