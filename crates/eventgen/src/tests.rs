//! Tests of the generator: the stream is parsed back with `serde_json` and replayed.
//!
//! The stream of a config with fewer blocks is a prefix of the stream with more (tested
//! below), so the first blocks of the default config stand for all of it: [`DEFAULT_PREFIX`]
//! is generated and analysed once and several tests assert on parts of the analysis, which
//! keeps the suite well under two seconds in debug builds.

mod analysis;
mod formats;
mod genesis;

use std::collections::HashSet;
use std::sync::LazyLock;

use super::*;
use analysis::{Analysis, IdFn, analyse, is_hex, market_id};

/// The first 250 of the default config's 2000 blocks.
fn default_prefix_config() -> GenerateConfig {
    GenerateConfig {
        blocks: 250,
        ..GenerateConfig::default()
    }
}

static DEFAULT_PREFIX: LazyLock<(GenerateSummary, Analysis)> =
    LazyLock::new(|| run(&default_prefix_config()));

fn output(config: &GenerateConfig) -> (GenerateSummary, Vec<u8>) {
    let mut bytes = Vec::new();
    let summary = generate(config, &mut bytes).expect("writing to a Vec cannot fail");
    (summary, bytes)
}

fn run(config: &GenerateConfig) -> (GenerateSummary, Analysis) {
    let (summary, bytes) = output(config);
    (summary, analyse(config, &bytes))
}

fn small(seed: u64) -> GenerateConfig {
    GenerateConfig {
        seed,
        blocks: 100,
        ..GenerateConfig::default()
    }
}

#[test]
fn same_config_gives_identical_bytes() {
    assert_eq!(output(&small(7)), output(&small(7)));
}

#[test]
fn fewer_blocks_give_a_prefix_of_the_stream() {
    let (_, short) = output(&GenerateConfig {
        blocks: 40,
        ..small(7)
    });
    let (_, long) = output(&GenerateConfig {
        blocks: 60,
        ..small(7)
    });
    assert!(long.len() > short.len() && long.starts_with(&short));
}

#[test]
fn different_seed_gives_different_bytes() {
    assert_ne!(output(&small(7)).1, output(&small(8)).1);
    assert_ne!(party_id(&small(7), 0), party_id(&small(8), 0));
}

#[test]
fn every_line_is_a_well_formed_event() {
    let (_, found) = &*DEFAULT_PREFIX;
    assert_eq!(found.format_problems, Vec::<String>::new());
}

#[test]
fn emitted_balances_match_a_replay() {
    let (_, found) = &*DEFAULT_PREFIX;
    assert_eq!(found.balance_problems, Vec::<String>::new());
}

#[test]
fn block_times_strictly_increase() {
    let (_, found) = &*DEFAULT_PREFIX;
    assert_eq!(found.time_problems, Vec::<String>::new());
}

#[test]
fn summary_matches_parsed_counts() {
    let (summary, found) = &*DEFAULT_PREFIX;
    let config = default_prefix_config();
    // The genesis block is one block more, with a deposit per party and asset.
    assert_eq!(summary.blocks, config.blocks + 1);
    assert_eq!(
        summary.ledger_entries,
        config.blocks * u64::from(config.entries_per_block)
            + u64::from(config.parties * config.assets)
    );
    assert_eq!(
        summary.oracle_data,
        config.blocks * u64::from(config.oracle_data_per_block)
    );
    assert_eq!(&found.counted, summary);
}

#[test]
fn default_config_has_every_edge_case() {
    let (_, found) = &*DEFAULT_PREFIX;
    let counts = [
        ("amounts above u64", found.big_amounts),
        ("same-party entries", found.same_party_entries),
        (
            "network to network entries",
            found.network_to_network_entries,
        ),
        ("uppercase owners", found.uppercase_owners),
        ("integers as JSON numbers", found.numeric_fields),
        ("movements split in two", found.split_movements),
        ("ACCOUNT events", found.account_events),
        ("oracle data with an error", found.oracle_errors),
        ("oracle data without a spec", found.oracle_without_spec),
        ("values needing unescaping", found.oracle_tricky_values),
    ];
    let missing: Vec<_> = counts.iter().filter(|(_, count)| *count == 0).collect();
    assert!(missing.is_empty(), "missing: {missing:?}");
}

#[test]
fn whale_share_sets_party_zero_involvement() {
    let config = GenerateConfig {
        whale_share: 0.5,
        ..small(3)
    };
    let (_, found) = run(&config);
    assert_eq!(found.balance_problems, Vec::<String>::new());
    let share = found.whale_entries as f64 / found.counted.ledger_entries as f64;
    assert!(
        (0.45..0.55).contains(&share),
        "party 0 in {share} of entries"
    );
}

#[test]
fn ids_are_distinct_and_well_formed() {
    let config = &GenerateConfig::default();
    let kinds: [(IdFn, u32); 4] = [
        (party_id, config.parties),
        (asset_id, config.assets),
        (market_id, config.markets),
        (spec_id, config.specs),
    ];
    let all: Vec<String> = kinds
        .iter()
        .flat_map(|&(id, count)| (0..count).map(move |index| id(config, index)))
        .collect();
    assert!(all.iter().all(|id| is_hex(id, 64, false)), "{all:?}");
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());
}

#[test]
fn invalid_configs_are_rejected_before_writing() {
    let cases = [
        GenerateConfig {
            parties: 1,
            ..small(1)
        },
        GenerateConfig {
            assets: 0,
            ..small(1)
        },
        GenerateConfig {
            markets: 0,
            ..small(1)
        },
        GenerateConfig {
            whale_share: 1.5,
            ..small(1)
        },
        GenerateConfig {
            whale_share: f64::NAN,
            ..small(1)
        },
        GenerateConfig {
            start_height: u64::MAX,
            ..small(1)
        },
        GenerateConfig {
            start_time_nanos: i64::MAX - 1,
            ..small(1)
        },
        GenerateConfig {
            other_events_share: 1.0,
            ..small(1)
        },
        GenerateConfig {
            other_events_share: -0.1,
            ..small(1)
        },
        GenerateConfig {
            other_events_share: f64::NAN,
            ..small(1)
        },
        GenerateConfig {
            chain_id: "".into(),
            ..small(1)
        },
    ];
    for config in cases {
        let mut bytes = Vec::new();
        let err = generate(&config, &mut bytes).expect_err("config must be rejected");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{config:?}");
        assert!(bytes.is_empty());
    }
}

#[test]
fn edge_sizes_still_produce_consistent_streams() {
    let cases = [
        GenerateConfig {
            parties: 2,
            assets: 1,
            markets: 1,
            specs: 0,
            blocks: 50,
            ..small(5)
        },
        GenerateConfig {
            parties: 2,
            whale_share: 1.0,
            blocks: 50,
            ..small(5)
        },
        GenerateConfig {
            entries_per_block: 0,
            oracle_data_per_block: 0,
            blocks: 5,
            ..small(5)
        },
        GenerateConfig {
            blocks: 0,
            ..small(5)
        },
    ];
    for config in cases {
        let (summary, found) = run(&config);
        assert_eq!(found.format_problems, Vec::<String>::new(), "{config:?}");
        assert_eq!(found.balance_problems, Vec::<String>::new(), "{config:?}");
        let genesis = u64::from(config.blocks > 0);
        assert_eq!(summary.blocks, config.blocks + genesis);
    }
}

/// Records the largest single write, to show output is streamed in bounded chunks.
struct ChunkWriter {
    largest: usize,
    total: usize,
}

impl Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.largest = self.largest.max(bytes.len());
        self.total += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn output_is_streamed_in_bounded_chunks() {
    let mut writer = ChunkWriter {
        largest: 0,
        total: 0,
    };
    generate(&small(9), &mut writer).expect("writer never fails");
    assert!(writer.total > 4 * FLUSH_AT);
    assert!(writer.largest < FLUSH_AT + 16 * 1024, "{}", writer.largest);
}

/// FNV-1a, 64 bits: enough to notice any changed byte, and six lines rather than a dependency
/// for one test.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The NDJSON stream is pinned: the figures below were computed from the generator as it was
/// before it left the `ingest` crate, so moving it, swapping its integer formatting for `itoa`,
/// adding the buffer format or the genesis block cannot change a byte that earlier datasets
/// (all written without a genesis block) were made of.
#[test]
fn ndjson_output_is_unchanged_since_the_move() {
    let (summary, bytes) = output(&GenerateConfig {
        whale_share: 0.3,
        genesis: false,
        ..small(11)
    });
    assert_eq!(
        (summary.events, bytes.len(), fnv1a(&bytes)),
        (1538, 1_746_100, 0x22c6_fd12_1f7c_ac24)
    );
}

/// The same stream with its genesis block (the default shape since issue 21), pinned as well.
#[test]
fn ndjson_output_with_genesis_is_pinned() {
    let (summary, bytes) = output(&GenerateConfig {
        whale_share: 0.3,
        ..small(11)
    });
    assert_eq!(
        (summary.events, bytes.len(), fnv1a(&bytes)),
        (1693, 1_883_871, 0x0c70_6f5e_5c85_4e76)
    );
}
