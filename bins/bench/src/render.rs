//! The results as plain-text tables, for the terminal.

use crate::listing::CLIENTS;
use crate::nginx::Baseline;
use crate::report::Results;
use crate::stats::Summary;

/// The results as plain-text tables.
pub(crate) fn render(results: &Results) -> String {
    let mut out = String::new();
    let machine = &results.machine;
    let config = &results.dataset.config;
    let generated = &results.dataset.generated;
    out += &format!(
        "bench {}  seed {}\nmachine: {} cores, {} MiB, {}, {} (kernel {})\n\n",
        results.timestamp,
        config.seed,
        machine.cores,
        machine.memory_total_mib.map_or("?".to_owned(), int_u),
        machine.cpu_model.as_deref().unwrap_or("unknown CPU"),
        machine.os,
        machine.kernel.as_deref().unwrap_or("?"),
    );
    out += &format!(
        "dataset  {} blocks, {} ledger entries, {} oracle data, {} events ({} of types not stored), {:.0} MB of {:?} ({})\n",
        int_u(generated.blocks),
        int_u(generated.ledger_entries),
        int_u(generated.oracle_data),
        int_u(generated.events),
        int_u(generated.other_events),
        generated.bytes as f64 / 1e6,
        generated.format,
        if results.dataset.reused {
            "reused".to_owned()
        } else {
            format!("generated in {:.1} s", generated.seconds)
        },
    );
    if let Some(ingest) = &results.ingest.record {
        out += &format!(
            "ingest   {:.1} s, {} entries/s, {} events/s, CPU {}, peak RSS {}, database {:.0} MB{}\n\n",
            ingest.seconds,
            int(ingest.entries_per_sec),
            int(ingest.events_per_sec),
            match (ingest.cpu_user_secs, ingest.cpu_system_secs) {
                (Some(user), Some(system)) => format!("{user:.1} s user + {system:.1} s system"),
                _ => "n/a".to_owned(),
            },
            ingest.peak_rss_kib.map_or("n/a".to_owned(), mib),
            ingest.db_bytes as f64 / 1e6,
            if results.ingest.reused {
                format!(" (measured {}, database reused)", ingest.measured_at)
            } else {
                String::new()
            },
        );
    }

    let runs = results
        .exports
        .first()
        .map_or(0, |export| export.time.count);
    out += &format!("export of party 0 as CSV: median of {runs} runs [min-max]\n");
    let rows: Vec<Vec<String>> = results
        .exports
        .iter()
        .map(|export| {
            vec![
                export.name.to_owned(),
                int_u(export.rows),
                format!("{:.1}", export.bytes as f64 / 1e6),
                spread(
                    export.time.p50_ms,
                    export.time.min_ms,
                    export.time.max_ms,
                    1,
                ),
                int(export.rows_per_sec),
                format!("{:.1}", export.mb_per_sec),
                spread(
                    export.ttfb.p50_ms,
                    export.ttfb.min_ms,
                    export.ttfb.max_ms,
                    1,
                ),
                format!("{:.1}", export.first_row.p50_ms),
            ]
        })
        .collect();
    out += &table(
        &[
            "case",
            "rows",
            "MB",
            "time ms",
            "rows/s",
            "MB/s",
            "TTFB ms",
            "1st row ms",
        ],
        &rows,
    );

    let slow = &results.slow_reader;
    out += &format!(
        "\nslow reader: {:.1} MB in {:.1} s (target {:.1} MB/s); server RSS {} before, peak {} \
         (100 ms samples), VmHWM {} after, {} after hang-up\n\n",
        slow.bytes_read as f64 / 1e6,
        slow.seconds,
        slow.target_bytes_per_sec as f64 / 1e6,
        mib(slow.rss_before_kib),
        mib(slow.peak_rss_kib),
        mib(slow.hwm_after_kib),
        mib(slow.rss_after_close_kib),
    );

    out += &format!(
        "oracle listing: latency with one keep-alive connection per page, requests interleaved; req/s with {CLIENTS:?} clients\n"
    );
    let rows: Vec<Vec<String>> = results
        .oracle_pages
        .iter()
        .map(|page| {
            let mut row = vec![
                if page.distinct_paths > 1 {
                    format!(
                        "{} ({} pages)",
                        page.name,
                        int_u(page.distinct_paths as u64)
                    )
                } else {
                    page.name.to_owned()
                },
                int_u(page.body_bytes as u64),
                int_u(page.latency.count as u64),
                format!("{:.3}", page.latency.p50_ms),
                format!("{:.3}", page.latency.p99_ms),
                format!("{:.3}", page.latency.max_ms),
            ];
            row.extend(page.throughput.iter().map(|run| int(run.per_sec)));
            row
        })
        .collect();
    out += &table(
        &[
            "page", "bytes", "requests", "p50 ms", "p99 ms", "max ms", "req/s x1", "req/s x4",
        ],
        &rows,
    );
    out += &format!(
        "deep page after {} rows; p50 deep / p50 first = {:.2}\n",
        int_u(results.deep_page_depth),
        results.deep_over_first_p50
    );
    if let Some(memory) = &results.server_memory_at_end {
        out += &format!(
            "server at the end: RSS {}, VmHWM {}\n",
            mib(memory.rss_kib),
            mib(memory.hwm_kib)
        );
    }

    out += &nginx(&results.nginx);

    out += "\ntargets\n";
    let rows: Vec<Vec<String>> = results
        .targets
        .iter()
        .map(|target| {
            vec![
                target.name.to_owned(),
                if target.value >= 100.0 {
                    int(target.value)
                } else {
                    format!("{:.2}", target.value)
                },
                target.goal.clone(),
                if target.met { "met" } else { "MISSED" }.to_owned(),
            ]
        })
        .collect();
    out += &table(&["figure", "value", "goal", ""], &rows);
    out
}

/// Our answers against nginx's copies of them.
fn nginx(baseline: &Baseline) -> String {
    let mut out = format!(
        "\nagainst nginx ({}{}) serving the same bytes, requests interleaved\n",
        baseline.binary,
        baseline
            .version
            .as_ref()
            .map_or(String::new(), |version| format!(", {version}")),
    );
    if let Some(reason) = &baseline.skipped {
        out += &format!("skipped: {reason}\n");
    }
    let mut rows = Vec::new();
    if let Some(export) = &baseline.export {
        rows.push(vec![
            format!(
                "{}, {:.1} MB, time ms",
                export.name,
                export.bytes as f64 / 1e6
            ),
            spread(
                export.ours.p50_ms,
                export.ours.min_ms,
                export.ours.max_ms,
                1,
            ),
            spread(
                export.nginx.p50_ms,
                export.nginx.min_ms,
                export.nginx.max_ms,
                1,
            ),
            format!("{:.2}x the time", export.time_ratio),
        ]);
        let cpu = |cpu: &Summary| spread(cpu.p50_ms, cpu.min_ms, cpu.max_ms, 1);
        let database = export
            .ours_database_cpu
            .as_ref()
            .map_or(String::new(), |db| format!(" + {} (database)", cpu(db)));
        rows.push(vec![
            format!("{}, CPU ms an export", export.name),
            format!("{}{database}", cpu(&export.ours_server_cpu)),
            cpu(&export.nginx_cpu),
            format!("{:.2}x the CPU", export.cpu_ratio),
        ]);
    }
    for page in &baseline.pages {
        rows.push(vec![
            format!(
                "{}, {} B, req/s x{}",
                page.name,
                int_u(page.body_bytes as u64),
                page.clients
            ),
            int(page.ours_per_sec),
            int(page.nginx_per_sec),
            format!("{:.2} of the rate", page.rate_ratio),
        ]);
    }
    if !rows.is_empty() {
        out += &table(&["answer", "ours", "nginx", "ratio"], &rows);
    }
    out
}

/// The main figures of several backends side by side, a column each.
pub(crate) fn side_by_side(all: &[Results]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |name: String, cell: &dyn Fn(&Results) -> String| {
        rows.push(std::iter::once(name).chain(all.iter().map(cell)).collect());
    };
    row("ingest entries/s".to_owned(), &|r| {
        r.ingest
            .record
            .as_ref()
            .map_or("n/a".to_owned(), |i| int(i.entries_per_sec))
    });
    row("ingest peak RSS".to_owned(), &|r| {
        r.ingest
            .record
            .as_ref()
            .and_then(|i| i.peak_rss_kib)
            .map_or("n/a".to_owned(), mib)
    });
    row("database MB".to_owned(), &|r| {
        r.ingest.record.as_ref().map_or("n/a".to_owned(), |i| {
            format!("{:.0}", i.db_bytes as f64 / 1e6)
        })
    });
    for (index, export) in all[0].exports.iter().enumerate() {
        row(format!("export {}: rows/s", export.name), &|r| {
            r.exports
                .get(index)
                .map_or("n/a".to_owned(), |e| int(e.rows_per_sec))
        });
        row(format!("export {}: TTFB p50 ms", export.name), &|r| {
            r.exports
                .get(index)
                .map_or("n/a".to_owned(), |e| format!("{:.1}", e.ttfb.p50_ms))
        });
    }
    row("slow reader: server peak RSS".to_owned(), &|r| {
        mib(r.slow_reader.peak_rss_kib)
    });
    for (index, page) in all[0].oracle_pages.iter().enumerate() {
        row(format!("page {}: p50 ms", page.name), &|r| {
            r.oracle_pages
                .get(index)
                .map_or("n/a".to_owned(), |p| format!("{:.3}", p.latency.p50_ms))
        });
        row(format!("page {}: req/s x4", page.name), &|r| {
            r.oracle_pages
                .get(index)
                .and_then(|p| p.throughput.last())
                .map_or("n/a".to_owned(), |t| int(t.per_sec))
        });
    }
    row("deep page p50 / first page p50".to_owned(), &|r| {
        format!("{:.2}", r.deep_over_first_p50)
    });
    let header: Vec<&str> = std::iter::once("side by side")
        .chain(all.iter().map(|r| r.backend))
        .collect();
    table(&header, &rows)
}

/// Columns padded to their widest cell: the first left-aligned, the others right-aligned.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.zip(&widths).enumerate() {
            if index == 0 {
                text += &format!("{cell:<width$}");
            } else {
                text += &format!("  {cell:>width$}");
            }
        }
        text.trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `median [min-max]`.
fn spread(median: f64, min: f64, max: f64, decimals: usize) -> String {
    format!("{median:.decimals$} [{min:.decimals$}-{max:.decimals$}]")
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// A rate or count, rounded, with thousands separators.
pub(crate) fn int(value: f64) -> String {
    if !value.is_finite() || value < 0.0 {
        return format!("{value:.0}");
    }
    int_u(value.round() as u64)
}

fn int_u(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_get_thousands_separators() {
        for (value, expected) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1_234_567, "1,234,567"),
        ] {
            assert_eq!(int_u(value), expected);
        }
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            vec!["a".to_owned(), "1".to_owned()],
            vec!["long name".to_owned(), "1,000".to_owned()],
        ];
        assert_eq!(
            table(&["name", "n"], &rows),
            "name           n\na              1\nlong name  1,000\n"
        );
    }
}
