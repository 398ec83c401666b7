//! Deterministic identifiers and hex encoding.
//!
//! Ids are a pure function of (seed, kind, index) rather than draws from the stream's RNG, so
//! that tests and the demo can name a party or a market without generating anything.

use ledger_core::hex::{self, LOWER, Pairs};
use rand::Rng;

/// What an id names; the discriminant salts the hash so kinds never share ids by construction.
#[derive(Clone, Copy, Debug)]
pub(super) enum IdKind {
    Party = 1,
    Asset = 2,
    Market = 3,
    Spec = 4,
    Signer = 5,
    EthAddress = 6,
    Account = 7,
}

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The splitmix64 finalizer: a bijection on `u64` with good avalanche.
///
/// See: <https://prng.di.unimi.it/splitmix64.c>
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 256 bits derived from (seed, kind, index).
///
/// The first word is a bijection of `index` for a fixed seed and kind, so ids of one kind are
/// distinct by construction, not merely with high probability.
fn id_words(seed: u64, kind: IdKind, index: u64) -> [u64; 4] {
    let salt = mix(seed ^ (kind as u64).wrapping_mul(GOLDEN_GAMMA));
    let first = mix(salt ^ index);
    let mut words = [first, 0, 0, 0];
    for (word_idx, word) in words.iter_mut().enumerate().skip(1) {
        *word = mix(first.wrapping_add((word_idx as u64).wrapping_mul(GOLDEN_GAMMA)) ^ salt);
    }
    words
}

/// A 64-character hex id (32 bytes), lowercase like Vega party, asset and market ids.
pub(super) fn hex_id(seed: u64, kind: IdKind, index: u64) -> [u8; 64] {
    let mut hex = [0u8; 64];
    for (chunk, word) in hex.chunks_exact_mut(16).zip(id_words(seed, kind, index)) {
        encode_u64(word, chunk, LOWER);
    }
    hex
}

/// Writes `word` as 16 hex digits into `out` (which must be 16 bytes long).
fn encode_u64(word: u64, out: &mut [u8], digits: &Pairs) {
    hex::encode_into(&word.to_be_bytes(), out, digits);
}

/// 64 random hex digits (a hash or a transfer id) drawn from `rng`.
pub(super) fn random_hex(rng: &mut impl Rng, digits: &Pairs) -> [u8; 64] {
    let mut hex = [0u8; 64];
    for chunk in hex.chunks_exact_mut(16) {
        encode_u64(rng.random(), chunk, digits);
    }
    hex
}

/// Every id the generator writes, computed once so the hot loop only copies bytes.
pub(super) struct IdTable {
    seed: u64,
    /// Party ids by index, lowercase.
    pub(super) parties: Vec<[u8; 64]>,
    /// Asset ids by index.
    pub(super) assets: Vec<[u8; 64]>,
    /// Market ids by index.
    pub(super) markets: Vec<[u8; 64]>,
    /// Oracle spec ids by index.
    pub(super) specs: Vec<[u8; 64]>,
    /// Oracle signer public keys, uppercase as in the sample.
    pub(super) signer_keys: Vec<[u8; 64]>,
    /// Ethereum signer addresses, 40 lowercase hex digits.
    pub(super) eth_addresses: Vec<[u8; 40]>,
}

impl IdTable {
    /// Signers are few and reused, as real oracle feeds are.
    const N_SIGNER_KEYS: u64 = 5;
    const N_ETH_ADDRESSES: u64 = 4;

    pub(super) fn new(seed: u64, parties: u32, assets: u32, markets: u32, specs: u32) -> Self {
        let table = |kind: IdKind, count: u32| -> Vec<[u8; 64]> {
            (0..u64::from(count))
                .map(|index| hex_id(seed, kind, index))
                .collect()
        };
        let signer_keys = (0..Self::N_SIGNER_KEYS)
            .map(|index| hex_id(seed, IdKind::Signer, index).map(|b| b.to_ascii_uppercase()))
            .collect();
        let eth_addresses = (0..Self::N_ETH_ADDRESSES)
            .map(|index| {
                let mut address = [0u8; 40];
                address.copy_from_slice(&hex_id(seed, IdKind::EthAddress, index)[..40]);
                address
            })
            .collect();
        IdTable {
            seed,
            parties: table(IdKind::Party, parties),
            assets: table(IdKind::Asset, assets),
            markets: table(IdKind::Market, markets),
            specs: table(IdKind::Spec, specs),
            signer_keys,
            eth_addresses,
        }
    }

    /// The id of an account in ACCOUNT events; rare, so derived on demand.
    pub(super) fn account_id(&self, account_index: u64) -> [u8; 64] {
        hex_id(self.seed, IdKind::Account, account_index)
    }
}
