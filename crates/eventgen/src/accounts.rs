//! The accounts, transfer types and entries the simulated ledger deals in.

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
