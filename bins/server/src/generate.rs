//! `server generate`: a synthetic, internally consistent event stream.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use eventgen::{Format, GenerateConfig};

/// Flags of `generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Seed: the same flags always give the same stream.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.seed)]
    seed: u64,
    /// Blocks to generate.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.blocks)]
    blocks: u64,
    /// Parties.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.parties)]
    parties: u32,
    /// Assets.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.assets)]
    assets: u32,
    /// Markets.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.markets)]
    markets: u32,
    /// Oracle specs.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.specs)]
    specs: u32,
    /// Ledger entries per block.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.entries_per_block)]
    entries_per_block: u32,
    /// Oracle data per block.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.oracle_data_per_block)]
    oracle_data_per_block: u32,
    /// Share of entries (0 to 1) that involve party 0, to make one very large party.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.whale_share)]
    whale_share: f64,
    /// Share of all events (0 to below 1) that are ACCOUNT events, a type the data node does not
    /// store, mixed in between the others; the stored events stay the same.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.other_events_share)]
    other_events_share: f64,
    /// Chain id on every event (`BusEvent.chain_id`), like vega-mainnet-0011 or
    /// vega-stagnet1-202307191148.
    #[arg(long, default_value_t = GenerateConfig::DEFAULT.chain_id.to_string())]
    chain_id: String,
    /// Output format: NDJSON (protobuf JSON, one event a line) or a Vega event buffer file.
    #[arg(long, value_enum, default_value_t = Format::default())]
    format: Format,
    /// Output file [default: standard output].
    #[arg(long, short)]
    output: Option<PathBuf>,
}

impl GenerateArgs {
    fn config(&self) -> GenerateConfig {
        GenerateConfig {
            seed: self.seed,
            blocks: self.blocks,
            parties: self.parties,
            assets: self.assets,
            markets: self.markets,
            specs: self.specs,
            entries_per_block: self.entries_per_block,
            oracle_data_per_block: self.oracle_data_per_block,
            whale_share: self.whale_share,
            other_events_share: self.other_events_share,
            chain_id: self.chain_id.clone().into(),
            ..GenerateConfig::DEFAULT
        }
    }
}

/// `generate`.
pub fn generate(args: GenerateArgs) -> Result<()> {
    let config = args.config();
    let out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let summary = eventgen::generate_as(&config, args.format, &mut out)?;
    out.flush().context("cannot write the stream")?;
    tracing::info!(
        events = summary.events,
        blocks = summary.blocks,
        ledger_entries = summary.ledger_entries,
        oracle_data = summary.oracle_data,
        other_events = summary.other_events,
        "generated"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: GenerateArgs,
    }

    /// The flags' defaults are the generator's own, not a second copy of them.
    #[test]
    fn no_flags_mean_the_generator_defaults() {
        let cli = Cli::try_parse_from(["generate"]).unwrap();
        assert_eq!(cli.args.config(), GenerateConfig::DEFAULT);
        assert_eq!(cli.args.format, Format::default());
    }

    #[test]
    fn format_other_events_and_chain_id_reach_the_generator() {
        let cli = Cli::try_parse_from([
            "generate",
            "--format",
            "vega-buffer",
            "--other-events-share",
            "0.9",
            "--chain-id",
            "vega-stagnet1-202307191148",
        ])
        .unwrap();
        assert_eq!(cli.args.format, Format::VegaBuffer);
        let config = cli.args.config();
        assert_eq!(config.other_events_share, 0.9);
        assert_eq!(config.chain_id, "vega-stagnet1-202307191148");
    }
}
