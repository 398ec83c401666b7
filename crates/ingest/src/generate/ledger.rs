//! The simulated ledger: account balances and the transfers that move them.
//!
//! Every entry is applied to the balances before it is written, so the emitted
//! `fromAccountBalance` / `toAccountBalance` are what a replay of the stream computes, and no
//! account other than EXTERNAL (the outside world) ever pays more than it holds.

use rand::Rng;

use super::GenerateConfig;

/// An account, by the indices of its owner, asset and market.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Account {
    /// The outside world for an asset: unlimited, its balance is always written as 0.
    External {
        asset: u32,
    },
    General {
        party: u32,
        asset: u32,
    },
    Margin {
        party: u32,
        market: u32,
    },
    FeesMaker {
        market: u32,
    },
    Settlement {
        market: u32,
    },
    Insurance {
        market: u32,
    },
    FeesInfrastructure {
        asset: u32,
    },
    GlobalReward {
        asset: u32,
    },
}

impl Account {
    /// The Vega `AccountType` name.
    pub(super) fn type_name(self) -> &'static str {
        match self {
            Account::External { .. } => "ACCOUNT_TYPE_EXTERNAL",
            Account::General { .. } => "ACCOUNT_TYPE_GENERAL",
            Account::Margin { .. } => "ACCOUNT_TYPE_MARGIN",
            Account::FeesMaker { .. } => "ACCOUNT_TYPE_FEES_MAKER",
            Account::Settlement { .. } => "ACCOUNT_TYPE_SETTLEMENT",
            Account::Insurance { .. } => "ACCOUNT_TYPE_INSURANCE",
            Account::FeesInfrastructure { .. } => "ACCOUNT_TYPE_FEES_INFRASTRUCTURE",
            Account::GlobalReward { .. } => "ACCOUNT_TYPE_GLOBAL_REWARD",
        }
    }

    /// The owning party; network and market accounts have none.
    pub(super) fn owner(self) -> Option<u32> {
        match self {
            Account::General { party, .. } | Account::Margin { party, .. } => Some(party),
            _ => None,
        }
    }

    /// The market of a market-scoped account.
    pub(super) fn market(self) -> Option<u32> {
        match self {
            Account::Margin { market, .. }
            | Account::FeesMaker { market }
            | Account::Settlement { market }
            | Account::Insurance { market } => Some(market),
            _ => None,
        }
    }
}

/// A Vega `TransferType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TransferType {
    Deposit,
    Withdraw,
    MarginLow,
    MarginHigh,
    MakerFeePay,
    MakerFeeReceive,
    InfrastructureFeePay,
    TransferFundsSend,
    TransferFundsDistribute,
    RewardPayout,
    MtmLoss,
    MtmWin,
}

impl TransferType {
    /// The enum name as protobuf JSON writes it.
    pub(super) fn name(self) -> &'static str {
        match self {
            TransferType::Deposit => "TRANSFER_TYPE_DEPOSIT",
            TransferType::Withdraw => "TRANSFER_TYPE_WITHDRAW",
            TransferType::MarginLow => "TRANSFER_TYPE_MARGIN_LOW",
            TransferType::MarginHigh => "TRANSFER_TYPE_MARGIN_HIGH",
            TransferType::MakerFeePay => "TRANSFER_TYPE_MAKER_FEE_PAY",
            TransferType::MakerFeeReceive => "TRANSFER_TYPE_MAKER_FEE_RECEIVE",
            TransferType::InfrastructureFeePay => "TRANSFER_TYPE_INFRASTRUCTURE_FEE_PAY",
            TransferType::TransferFundsSend => "TRANSFER_TYPE_TRANSFER_FUNDS_SEND",
            TransferType::TransferFundsDistribute => "TRANSFER_TYPE_TRANSFER_FUNDS_DISTRIBUTE",
            TransferType::RewardPayout => "TRANSFER_TYPE_REWARD_PAYOUT",
            TransferType::MtmLoss => "TRANSFER_TYPE_MTM_LOSS",
            TransferType::MtmWin => "TRANSFER_TYPE_MTM_WIN",
        }
    }
}

/// One applied ledger entry, ready to be written.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) from: Account,
    pub(super) to: Account,
    pub(super) amount: u128,
    pub(super) transfer_type: TransferType,
    pub(super) from_balance: u128,
    pub(super) to_balance: u128,
    pub(super) has_transfer_id: bool,
}

/// What the next entry does; several scenarios share a transfer type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Deposit,
    Withdraw,
    MarginLow,
    MarginHigh,
    MakerFeePay,
    MakerFeeReceive,
    InfrastructureFeePay,
    TransferSend,
    TransferDistribute,
    RewardPayout,
    /// EXTERNAL → GLOBAL_REWARD: an entry with no owner on either side.
    FundReward,
    MtmLoss,
    MtmWin,
    /// A pool account feeding GLOBAL_REWARD: the rare network → network entry.
    NetworkTransfer,
}

/// Relative weights (per mille) of the scenarios; deposits dominate so that accounts stay
/// funded and the fallbacks below fire only occasionally.
const SCENARIO_WEIGHTS: [(Scenario, u32); 14] = [
    (Scenario::Deposit, 170),
    (Scenario::Withdraw, 50),
    (Scenario::MarginLow, 120),
    (Scenario::MarginHigh, 70),
    (Scenario::MakerFeePay, 120),
    (Scenario::MakerFeeReceive, 90),
    (Scenario::InfrastructureFeePay, 60),
    (Scenario::TransferSend, 50),
    (Scenario::TransferDistribute, 80),
    (Scenario::RewardPayout, 60),
    (Scenario::FundReward, 10),
    (Scenario::MtmLoss, 60),
    (Scenario::MtmWin, 55),
    (Scenario::NetworkTransfer, 5),
];

impl Scenario {
    fn pick(rng: &mut impl Rng) -> Scenario {
        let total: u32 = SCENARIO_WEIGHTS.iter().map(|(_, weight)| weight).sum();
        let mut ticket = rng.random_range(0..total);
        for (scenario, weight) in SCENARIO_WEIGHTS {
            if ticket < weight {
                return scenario;
            }
            ticket -= weight;
        }
        Scenario::Deposit
    }

    /// What to do instead when the paying account is empty; every chain ends at a deposit,
    /// which always succeeds.
    fn fallback(self) -> Scenario {
        match self {
            Scenario::MarginHigh | Scenario::MtmLoss => Scenario::MarginLow,
            Scenario::MakerFeeReceive => Scenario::MakerFeePay,
            Scenario::RewardPayout => Scenario::FundReward,
            Scenario::MtmWin => Scenario::MtmLoss,
            Scenario::NetworkTransfer => Scenario::InfrastructureFeePay,
            _ => Scenario::Deposit,
        }
    }

    fn involves_no_party(self) -> bool {
        matches!(self, Scenario::FundReward | Scenario::NetworkTransfer)
    }
}

/// Balances of every account the generator can touch, in flat vectors indexed by
/// party/asset/market: the hot loop does no hashing and memory depends only on the sizes.
pub(super) struct Ledger {
    n_parties: u32,
    n_assets: u32,
    n_markets: u32,
    whale_share: f64,
    general: Vec<u128>,
    margin: Vec<u128>,
    fees_maker: Vec<u128>,
    settlement: Vec<u128>,
    insurance: Vec<u128>,
    fees_infrastructure: Vec<u128>,
    global_reward: Vec<u128>,
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
            general: vec![0; parties * assets],
            margin: vec![0; parties * markets],
            fees_maker: vec![0; markets],
            settlement: vec![0; markets],
            insurance: vec![0; markets],
            fees_infrastructure: vec![0; assets],
            global_reward: vec![0; assets],
        }
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

    /// The balance cell of an account; `None` for EXTERNAL, which has no tracked balance.
    fn slot(&mut self, account: Account) -> Option<&mut u128> {
        let assets = self.n_assets as usize;
        let markets = self.n_markets as usize;
        let cell = match account {
            Account::External { .. } => return None,
            Account::General { party, asset } => {
                &mut self.general[party as usize * assets + asset as usize]
            }
            Account::Margin { party, market } => {
                &mut self.margin[party as usize * markets + market as usize]
            }
            Account::FeesMaker { market } => &mut self.fees_maker[market as usize],
            Account::Settlement { market } => &mut self.settlement[market as usize],
            Account::Insurance { market } => &mut self.insurance[market as usize],
            Account::FeesInfrastructure { asset } => &mut self.fees_infrastructure[asset as usize],
            Account::GlobalReward { asset } => &mut self.global_reward[asset as usize],
        };
        Some(cell)
    }

    /// The current balance (0 for EXTERNAL, as Vega shows it).
    pub(super) fn balance(&mut self, account: Account) -> u128 {
        self.slot(account).map_or(0, |cell| *cell)
    }

    /// Draws the next entry, applies it and returns it with the balances after the move.
    pub(super) fn next_entry(&mut self, rng: &mut impl Rng) -> Entry {
        let whale = self.whale_share > 0.0 && rng.random_bool(self.whale_share);
        let primary = if whale { 0 } else { self.ordinary_party(rng) };
        let mut scenario = Scenario::pick(rng);
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
                (general, to, T::Withdraw, Wish::Fraction(1, 4))
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
        let amount = match self.slot(from).map(|cell| *cell) {
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
        if let Some(cell) = self.slot(from) {
            *cell -= amount;
        }
        if let Some(cell) = self.slot(to) {
            // Saturation is unreachable in practice (u128 holds 10^38 while huge deposits are
            // about 10^23), and keeps a pathological run from panicking.
            *cell = cell.saturating_add(amount);
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

/// How much a scenario would like to move before the payer's balance caps it.
#[derive(Clone, Copy, Debug)]
enum Wish {
    /// A uniform amount in `[low, high)`.
    Range(u128, u128),
    /// Up to `balance >> shift`, with `shift` drawn from the inclusive range.
    Fraction(u32, u32),
}

impl Wish {
    fn draw_unbounded(self, rng: &mut impl Rng) -> u128 {
        match self {
            Wish::Range(low, high) => rng.random_range(low..high),
            // Only EXTERNAL pays unbounded, and only for deposits, which use ranges.
            Wish::Fraction(..) => 1,
        }
    }

    /// Never more than `available`, never 0 (callers pass `available > 0`).
    fn draw_bounded(self, available: u128, rng: &mut impl Rng) -> u128 {
        let cap = match self {
            Wish::Range(low, high) => rng.random_range(low..high).min(available),
            Wish::Fraction(min_shift, max_shift) => {
                let cap = available >> rng.random_range(min_shift..=max_shift);
                rng.random_range(1..=cap.max(1))
            }
        };
        cap.clamp(1, available)
    }
}

/// Deposits are mostly 10^9..10^12, but 1% exceed 64 bits so that ingest must carry amounts
/// as 256-bit integers.
fn deposit_amount(rng: &mut impl Rng) -> Wish {
    if rng.random_ratio(1, 100) {
        Wish::Range(10_u128.pow(21), 10_u128.pow(24))
    } else {
        Wish::Range(1_000_000_000, 1_000_000_000_000)
    }
}
