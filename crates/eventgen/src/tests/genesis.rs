//! The stream's shape as a real core writes it: the genesis block and the first block at one
//! height, the chain id and the block hash on every event (the envelope checks are the
//! analysis'; these tests read the blocks it records).

use prost::Message;

use super::analysis::{Analysis, BlockSeen};
use super::{DEFAULT_PREFIX, default_prefix_config, run, small};
use crate::{Format, GenerateConfig, generate_as};

const DEPOSIT: &str = "TRANSFER_TYPE_DEPOSIT";
const GENERAL: &str = "ACCOUNT_TYPE_GENERAL";

#[track_caller]
fn assert_clean(found: &Analysis) {
    assert_eq!(found.format_problems, Vec::<String>::new());
    assert_eq!(found.balance_problems, Vec::<String>::new());
    assert_eq!(found.time_problems, Vec::<String>::new());
}

/// Ids `<height>-<seq>` of a block.
fn ids(block: &BlockSeen) -> Vec<String> {
    let height = block.height;
    block
        .seqs
        .iter()
        .map(|seq| format!("{height}-{seq}"))
        .collect()
}

#[test]
fn stream_opens_with_two_blocks_of_the_first_height() {
    let (_, found) = &*DEFAULT_PREFIX;
    let config = default_prefix_config();
    let [genesis, first, second, ..] = &found.blocks[..] else {
        panic!("{} blocks", found.blocks.len());
    };
    assert_eq!(
        (genesis.height, first.height, second.height),
        (
            config.start_height,
            config.start_height,
            config.start_height + 1
        )
    );
    assert_eq!(genesis.time, first.time);
    assert_ne!(genesis.hash, first.hash);
    // The sequence restarts: the first block's ids are the genesis block's first ids again.
    assert_eq!(genesis.seqs[0], 1);
    assert_eq!(first.seqs[0], 1);
    assert!(ids(genesis).starts_with(&ids(first)[..3]));
    let heights: Vec<u64> = found.blocks[1..].iter().map(|block| block.height).collect();
    let expected: Vec<u64> = (config.start_height..config.end_height()).collect();
    assert_eq!(heights, expected);
}

#[test]
fn genesis_block_funds_every_general_account_and_nothing_else() {
    let (_, found) = &*DEFAULT_PREFIX;
    let config = default_prefix_config();
    let genesis = &found.blocks[0];
    assert_eq!(genesis.oracle_data, 0);
    assert_eq!(genesis.entries.len() as u32, config.parties * config.assets);
    assert!(
        genesis
            .entries
            .iter()
            .all(|(transfer, to)| transfer == DEPOSIT && to == GENERAL),
        "{:?}",
        genesis.entries
    );
}

/// The end-to-end case needs a deposit in the second block of the first height.
#[test]
fn first_block_after_genesis_opens_with_a_deposit() {
    let (_, found) = &*DEFAULT_PREFIX;
    let config = default_prefix_config();
    let first = &found.blocks[1];
    assert_eq!(
        first.entries.len() as u32,
        config.entries_per_block,
        "the first block carries its usual ledger movements"
    );
    assert_eq!(first.entries[0].0, DEPOSIT);
    assert_eq!(first.oracle_data, u64::from(config.oracle_data_per_block));
}

/// The analysis compares every event's `chainId` with the config's; a chain id that needs
/// escaping in JSON comes back whole.
#[test]
fn every_event_carries_the_configured_chain_id() {
    for chain_id in ["vega-stagnet1-202307191148", "chain \"with\" \\ quotes ü"] {
        let config = GenerateConfig {
            chain_id: chain_id.into(),
            blocks: 20,
            ..small(21)
        };
        let (summary, found) = run(&config);
        assert_clean(&found);
        assert_eq!(found.counted, summary, "{chain_id}");
    }
}

/// A stream that continues another starts at its height directly, one block per height.
#[test]
fn a_stream_without_genesis_starts_at_its_first_height_directly() {
    let config = GenerateConfig {
        genesis: false,
        start_height: 5000,
        blocks: 30,
        ..small(22)
    };
    let (summary, found) = run(&config);
    assert_clean(&found);
    assert_eq!(summary.blocks, 30);
    let heights: Vec<u64> = found.blocks.iter().map(|block| block.height).collect();
    assert_eq!(heights, (5000..5030).collect::<Vec<_>>());
    assert_eq!(config.end_height(), 5030);
}

/// The buffer form holds the same pair: two BeginBlock records of one height with different
/// hashes, each event's `block` its BeginBlock's hash and its `chain_id` the config's.
#[test]
fn buffer_form_opens_with_the_first_height_pair() {
    let config = GenerateConfig {
        chain_id: "vega-testnet-0099".into(),
        blocks: 5,
        ..small(23)
    };
    let mut bytes = Vec::new();
    generate_as(&config, Format::VegaBuffer, &mut bytes).unwrap();
    let mut rest = &bytes[..];
    let mut begins = Vec::new();
    let mut hash = String::new();
    while !rest.is_empty() {
        let size = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let event = bus_proto::BusEvent::decode(&rest[12..4 + size]).unwrap();
        rest = &rest[4 + size..];
        if let Some(bus_proto::bus_event::Event::BeginBlock(begin)) = &event.event {
            hash.clone_from(&begin.hash);
            begins.push((begin.height, begin.hash.clone(), event.id.clone()));
        }
        assert_eq!(event.block, hash, "{}", event.id);
        assert_eq!(event.chain_id, "vega-testnet-0099", "{}", event.id);
    }
    let height = config.start_height;
    assert_eq!(begins.len(), 6);
    assert_eq!((begins[0].0, begins[1].0), (height, height));
    assert_ne!(begins[0].1, begins[1].1);
    assert_eq!(begins[0].2, begins[1].2);
    assert!(begins.iter().all(|(_, hash, _)| hash.len() == 64));
}
