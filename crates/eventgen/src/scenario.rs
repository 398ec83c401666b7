//! What a ledger entry does (a scenario) and how much it tries to move.

use rand::Rng;

/// What the next entry does; several scenarios share a transfer type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scenario {
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
    /// Draws a scenario according to [`SCENARIO_WEIGHTS`].
    pub(super) fn pick(rng: &mut impl Rng) -> Scenario {
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
    pub(super) fn fallback(self) -> Scenario {
        match self {
            Scenario::MarginHigh | Scenario::MtmLoss => Scenario::MarginLow,
            Scenario::MakerFeeReceive => Scenario::MakerFeePay,
            Scenario::RewardPayout => Scenario::FundReward,
            Scenario::MtmWin => Scenario::MtmLoss,
            Scenario::NetworkTransfer => Scenario::InfrastructureFeePay,
            _ => Scenario::Deposit,
        }
    }

    /// Whether the entry has no owner on either side, so it cannot involve the whale.
    pub(super) fn involves_no_party(self) -> bool {
        matches!(self, Scenario::FundReward | Scenario::NetworkTransfer)
    }
}

/// How much a scenario would like to move before the payer's balance caps it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Wish {
    /// A uniform amount in `[low, high)`.
    Range(u128, u128),
    /// Up to `balance >> shift`, with `shift` drawn from the inclusive range, and never more
    /// than [`ORDINARY_CAP`]: a party holding 10^23 after a huge deposit still moves
    /// ordinary amounts, so huge amounts stay rare.
    Fraction(u32, u32),
    /// Between half and all of the balance, however large.
    Sweep,
}

/// The most a fraction-of-balance move takes: about the largest ordinary deposit.
const ORDINARY_CAP: u128 = 10_000_000_000_000;

impl Wish {
    /// The amount when the payer is EXTERNAL, which holds no balance to cap it.
    pub(super) fn draw_unbounded(self, rng: &mut impl Rng) -> u128 {
        match self {
            Wish::Range(low, high) => rng.random_range(low..high),
            // Only EXTERNAL pays unbounded, and only for deposits, which use ranges.
            Wish::Fraction(..) | Wish::Sweep => 1,
        }
    }

    /// Never more than `available`, never 0 (callers pass `available > 0`).
    pub(super) fn draw_bounded(self, available: u128, rng: &mut impl Rng) -> u128 {
        let amount = match self {
            Wish::Range(low, high) => rng.random_range(low..high),
            Wish::Fraction(min_shift, max_shift) => {
                let cap = (available >> rng.random_range(min_shift..=max_shift)).min(ORDINARY_CAP);
                rng.random_range(1..=cap.max(1))
            }
            Wish::Sweep => rng.random_range(available / 2..=available),
        };
        amount.clamp(1, available)
    }
}

/// Deposits are mostly 10^9..10^12, but 1% exceed 64 bits so that ingest must carry amounts
/// as 256-bit integers.
pub(super) fn deposit_amount(rng: &mut impl Rng) -> Wish {
    if rng.random_ratio(1, 100) {
        Wish::Range(10_u128.pow(21), 10_u128.pow(24))
    } else {
        Wish::Range(1_000_000_000, 1_000_000_000_000)
    }
}
