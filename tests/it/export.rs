//! `GET /api/v2/ledgerentry/export`: the CSV file, its headers, the message form, errors, and
//! exports the client abandons.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http_api::AppConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::reference::{CSV_HEADER, Filter, file_time};
use crate::support::{Exchange, Server, Shared, get, mixed, request, whale};

const EXPORT: &str = "/api/v2/ledgerentry/export";

/// A valid id that names nothing in any dataset.
const UNKNOWN_ID: &str = "abababababababababababababababababababababababababababababababab";

/// The query string of `filter`, with ids as given.
fn query(filter: Filter<'_>) -> String {
    let mut query = format!("partyId={}", filter.party);
    if let Some(asset) = filter.asset {
        query.push_str(&format!("&assetId={asset}"));
    }
    if let Some(start) = filter.start {
        query.push_str(&format!("&dateRange.startTimestamp={start}"));
    }
    if let Some(end) = filter.end {
        query.push_str(&format!("&dateRange.endTimestamp={end}"));
    }
    query
}

/// The `Content-Disposition` Vega gives the export of `filter`.
fn disposition(filter: Filter<'_>) -> String {
    let mut name = format!("attachment;filename=ledger_entries_{}", filter.party);
    if let Some(asset) = filter.asset {
        name.push_str(&format!("_{asset}"));
    }
    if let Some(start) = filter.start {
        name.push_str(&format!("_{}", file_time(start)));
    }
    if let Some(end) = filter.end {
        name.push_str(&format!("-{}", file_time(end)));
    }
    name.push_str(".csv");
    name
}

/// Panics at the first line where `got` and `expected` differ, which is readable where a diff
/// of two megabytes is not.
#[track_caller]
fn assert_same_text(got: &str, expected: &str, context: &str) {
    if got == expected {
        return;
    }
    let mut got_lines = got.split_inclusive('\n');
    let mut expected_lines = expected.split_inclusive('\n');
    for line_no in 1.. {
        match (got_lines.next(), expected_lines.next()) {
            (Some(g), Some(e)) if g == e => continue,
            (g, e) => panic!(
                "{context}: line {line_no} differs (got {} lines, expected {})\n got: {g:?}\nwant: {e:?}",
                got.lines().count(),
                expected.lines().count()
            ),
        }
    }
}

/// The export of `filter` (ids sent as written in `filter`) is exactly the model's CSV, with
/// the CSV headers; the model is asked with lowercase ids.
#[track_caller]
fn check(set: &Shared, filter: Filter<'_>) {
    let party = filter.party.to_ascii_lowercase();
    let asset = filter.asset.map(str::to_ascii_lowercase);
    let normalised = Filter {
        party: &party,
        asset: asset.as_deref(),
        ..filter
    };
    let target = format!("{EXPORT}?{}", query(filter));
    let response = set.get(&target);
    assert_eq!(response.status, 200, "{target}: {}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("text/csv"),
        "{target}"
    );
    assert_eq!(
        response.header("content-disposition"),
        Some(disposition(normalised).as_str()),
        "{target}"
    );
    assert_same_text(response.text(), &set.reference().csv(normalised), &target);
}

#[test]
fn export_matches_the_reference_for_every_party_and_asset() {
    for set in [mixed(), whale()] {
        let parties = set.reference().parties();
        assert!(parties.len() >= 4, "{parties:?}");
        for party in &parties {
            check(
                set,
                Filter {
                    party,
                    ..Filter::default()
                },
            );
            let assets = set.reference().assets_of(party);
            for asset in &assets {
                let filter = Filter {
                    party,
                    asset: Some(asset),
                    ..Filter::default()
                };
                check(set, filter);
            }
            let unknown_asset = Filter {
                party,
                asset: Some(UNKNOWN_ID),
                ..Filter::default()
            };
            check(set, unknown_asset);
        }
    }
}

/// Issue 21: a core's stream holds two blocks of its first height, the genesis block and the
/// first real block (whose ids repeat the genesis block's); a deposit in the second one is
/// exported like any other, after the genesis block's rows of the same time.
#[test]
fn a_deposit_in_the_second_block_of_the_first_height_is_exported() {
    let set = mixed();
    let reference = set.reference();
    let in_block = |number: u64| reference.entries.iter().filter(move |e| e.key.1 == number);
    let genesis_time = in_block(0)
        .next()
        .expect("the genesis block deposits")
        .key
        .0;
    let deposit = in_block(1)
        .find(|entry| entry.transfer_type == "TRANSFER_TYPE_DEPOSIT")
        .expect("the first real block opens with a deposit");
    assert_eq!(deposit.key.0, genesis_time, "both blocks have one time");
    let party = deposit
        .to
        .owner
        .as_deref()
        .expect("a deposit goes to a party");
    let response = set.get(&format!("{EXPORT}?partyId={party}"));
    assert_eq!(response.status, 200);
    let line = deposit.csv_line(party);
    assert!(
        response.text().split_inclusive('\n').any(|got| got == line),
        "{line:?} missing from the export"
    );
    check(
        set,
        Filter {
            party,
            ..Filter::default()
        },
    );
}

#[test]
fn export_time_windows_are_start_inclusive_end_exclusive() {
    let set = mixed();
    let reference = set.reference();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let first = reference.entries.first().expect("entries").key.0;
    let last = reference.entries.last().expect("entries").key.0;
    for party in &reference.parties() {
        let times: Vec<i64> = reference.entries_of(party).map(|e| e.key.0).collect();
        let assets: Vec<String> = reference.assets_of(party).into_iter().collect();
        let mut time = || times[rng.random_range(0..times.len())];
        let mut windows: Vec<(Option<i64>, Option<i64>)> = Vec::new();
        // Bounds exactly on entry times: the start's rows are in, the end's rows are out.
        for _ in 0..4 {
            let (a, b) = (time(), time());
            windows.push((Some(a.min(b)), Some(a.max(b))));
        }
        let (start, end, equal) = (time(), time(), time());
        windows.push((Some(start), None));
        windows.push((None, Some(end)));
        windows.push((Some(equal), Some(equal)));
        // Bounds anywhere, including outside the data and one nanosecond around entries.
        for _ in 0..4 {
            let a = rng.random_range(first - 2_000_000_000..=last + 2_000_000_000);
            let b = rng.random_range(first - 2_000_000_000..=last + 2_000_000_000);
            windows.push((Some(a.min(b)), Some(a.max(b))));
        }
        let near = times[times.len() / 2];
        windows.push((Some(near + 1), Some(near + 2)));
        windows.push((Some(near - 1), Some(near + 1)));
        windows.push((Some(near + 1), None));
        windows.push((None, Some(near + 1)));
        // Bounds far away, before 1970 (fractional seconds round down in the file name) and at
        // the ends of int64.
        windows.push((Some(-1_500_000_000), None));
        windows.push((Some(i64::MIN), Some(i64::MAX)));
        windows.push((Some(-1), Some(near)));
        for (window_idx, (start, end)) in windows.into_iter().enumerate() {
            let asset = (window_idx % 3 == 0).then(|| assets[window_idx % assets.len()].as_str());
            check(
                set,
                Filter {
                    party,
                    asset,
                    start,
                    end,
                },
            );
        }
        // start == end selects nothing.
        let empty = Filter {
            party,
            start: Some(equal),
            end: Some(equal),
            ..Filter::default()
        };
        assert_eq!(reference.csv(empty), CSV_HEADER);
    }
}

#[test]
fn export_of_an_unknown_party_is_the_header_only() {
    let set = mixed();
    for filter in [
        Filter {
            party: UNKNOWN_ID,
            ..Filter::default()
        },
        Filter {
            party: UNKNOWN_ID,
            asset: Some(UNKNOWN_ID),
            start: Some(0),
            end: Some(i64::MAX),
        },
    ] {
        assert_eq!(set.reference().csv(filter), CSV_HEADER);
        check(set, filter);
    }
}

#[test]
fn export_accepts_uppercase_ids_and_ignores_unknown_parameters() {
    let set = mixed();
    let party = set.reference().largest_party();
    let asset = set
        .reference()
        .assets_of(&party)
        .into_iter()
        .next()
        .expect("an asset");
    let (party_upper, asset_upper) = (party.to_ascii_uppercase(), asset.to_ascii_uppercase());
    check(
        set,
        Filter {
            party: &party_upper,
            ..Filter::default()
        },
    );
    check(
        set,
        Filter {
            party: &party_upper,
            asset: Some(&asset_upper),
            ..Filter::default()
        },
    );

    let target =
        format!("{EXPORT}?foo=bar&partyId={party_upper}&pagination.first=3&assetId={asset}&x");
    let response = set.get(&target);
    assert_eq!(response.status, 200, "{}", response.text());
    let filter = Filter {
        party: &party,
        asset: Some(&asset),
        ..Filter::default()
    };
    assert_eq!(
        response.header("content-disposition"),
        Some(disposition(filter).as_str())
    );
    assert_same_text(response.text(), &set.reference().csv(filter), &target);
}

#[test]
fn export_effects_sum_to_final_balances() {
    for set in [mixed(), whale()] {
        let balances = set.reference().final_balances();
        let mut sums: BTreeMap<(String, String), i128> = BTreeMap::new();
        for party in set.reference().parties() {
            let response = set.get(&format!("{EXPORT}?partyId={party}"));
            assert_eq!(response.status, 200);
            let mut lines = response.text().lines();
            assert_eq!(lines.next(), Some(CSV_HEADER.trim_end()));
            for line in lines {
                let fields: Vec<&str> = line.split(',').collect();
                assert_eq!(fields.len(), 13, "{line}");
                let effect: i128 = fields[2]
                    .parse()
                    .unwrap_or_else(|_| panic!("effect of {line}"));
                let sum = sums
                    .entry((party.clone(), fields[4].to_owned()))
                    .or_default();
                *sum = sum.checked_add(effect).expect("sums fit in i128");
            }
        }
        assert_eq!(
            sums.keys().collect::<Vec<_>>(),
            balances.keys().collect::<Vec<_>>()
        );
        let mut big = 0;
        for (key, balance) in &balances {
            assert_eq!(
                u128::try_from(sums[key]).ok(),
                Some(*balance),
                "party {} asset {}",
                key.0,
                key.1
            );
            big += usize::from(*balance > u128::from(u64::MAX));
        }
        // The sums exercise amounts past 64 bits, not just small ones.
        assert!(big > 0, "no balance exceeds 64 bits");
    }
}

/// The message form of `filter`: every line is an `HttpBody` message, the first one carrying
/// the normalised request, and their data concatenate to the CSV file.
#[track_caller]
fn check_messages(set: &Shared, filter: Filter<'_>, accept: &str, min_lines: usize) {
    let target = format!("{EXPORT}?{}", query(filter));
    let response = get(set.server.addr, &target, &[("Accept", accept)]);
    assert_eq!(response.status, 200, "{target}: {}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("application/x-ndjson")
    );

    let party = filter.party.to_ascii_lowercase();
    let asset = filter.asset.map(str::to_ascii_lowercase);
    let normalised = Filter {
        party: &party,
        asset: asset.as_deref(),
        ..filter
    };
    let mut request = json!({
        "@type": "type.googleapis.com/datanode.api.v2.ExportLedgerEntriesRequest",
        "partyId": party,
    });
    if let Some(asset) = &asset {
        request["assetId"] = json!(asset);
    }
    if filter.start.is_some() || filter.end.is_some() {
        let mut range = json!({});
        if let Some(start) = filter.start {
            range["startTimestamp"] = json!(start.to_string());
        }
        if let Some(end) = filter.end {
            range["endTimestamp"] = json!(end.to_string());
        }
        request["dateRange"] = range;
    }

    let text = response.text();
    assert!(text.ends_with('\n'), "{target}: unterminated last line");
    let mut csv = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= min_lines, "{target}: {} lines", lines.len());
    for (line_idx, line) in lines.iter().enumerate() {
        let message: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("{target}: line {line_idx} ({err}): {line}"));
        crate::schema::export_message(&message);
        let extensions = if line_idx == 0 {
            json!([request])
        } else {
            json!([])
        };
        let data = message["result"]["data"]
            .as_str()
            .expect("data is a string");
        let expected = json!({
            "result": {"contentType": "text/csv", "data": data, "extensions": extensions}
        });
        assert_eq!(message, expected, "{target}: line {line_idx}");
        csv.extend(BASE64.decode(data).expect("data is base64"));
    }
    let csv = String::from_utf8(csv).expect("the CSV is UTF-8");
    assert_same_text(&csv, &set.reference().csv(normalised), &target);
}

#[test]
fn export_message_form_carries_the_same_csv() {
    let set = mixed();
    let party = set.reference().largest_party();
    let asset = set.reference().assets_of(&party).pop_last().expect("asset");
    let times: Vec<i64> = set
        .reference()
        .entries_of(&party)
        .map(|e| e.key.0)
        .collect();
    let (start, end) = (times[times.len() / 4], times[times.len() * 3 / 4]);
    let upper = party.to_ascii_uppercase();
    let filters = [
        Filter {
            party: &party,
            ..Filter::default()
        },
        Filter {
            party: &upper,
            asset: Some(&asset),
            start: Some(start),
            end: Some(end),
        },
        Filter {
            party: &party,
            start: Some(start),
            ..Filter::default()
        },
        Filter {
            party: &party,
            end: Some(end),
            ..Filter::default()
        },
        Filter {
            party: UNKNOWN_ID,
            ..Filter::default()
        },
    ];
    for accept in ["application/json", "application/x-ndjson"] {
        for filter in filters {
            check_messages(set, filter, accept, 1);
        }
    }
    // A big export spans several messages; only the first carries the request.
    let whale = whale();
    let party = whale.reference().largest_party();
    let filter = Filter {
        party: &party,
        ..Filter::default()
    };
    check_messages(whale, filter, "application/json", 3);
}

/// What an invalid request must get: 400 and Vega's stream error envelope.
#[track_caller]
fn check_error(query: &str, detail: u32, message: &str, inner: Option<&str>) {
    let target = format!("{EXPORT}?{query}");
    let response = mixed().get(&target);
    assert_eq!(response.status, 400, "{target}: {}", response.text());
    assert_eq!(response.header("content-type"), Some("application/json"));
    let body = response.json();
    crate::schema::stream_error(&body);
    let got_inner = body["error"]["details"][0]["inner"]
        .as_str()
        .unwrap_or_else(|| panic!("{target}: no inner in {body}"))
        .to_owned();
    let expected = json!({"error": {
        "code": 3,
        "message": "InvalidArgument error",
        "details": [{
            "@type": "type.googleapis.com/vega.ErrorDetail",
            "code": detail,
            "message": message,
            "inner": got_inner,
        }],
    }});
    assert_eq!(body, expected, "{target}");
    match inner {
        Some("") => assert_eq!(got_inner, "", "{target}"),
        Some(part) => assert!(got_inner.contains(part), "{target}: inner {got_inner:?}"),
        None => {}
    }
}

#[test]
fn export_rejects_invalid_requests() {
    let party = mixed().reference().largest_party();
    let p = format!("partyId={party}");
    let start = "dateRange.startTimestamp";
    let end = "dateRange.endTimestamp";
    check_error("", 10014, "missing party id", Some(""));
    check_error("partyId=", 10014, "missing party id", Some(""));
    check_error("assetId=abc", 10014, "missing party id", Some(""));
    check_error("partyId=xyz", 10000, "invalid party id", None);
    check_error(
        &format!("partyId={}", &party[1..]),
        10000,
        "invalid party id",
        None,
    );
    check_error(
        &format!("partyId={party}0"),
        10000,
        "invalid party id",
        None,
    );
    check_error(
        &format!("partyId=g{}", &party[1..]),
        10000,
        "invalid party id",
        None,
    );
    check_error(&format!("{p}&assetId=xyz"), 10038, "invalid asset ID", None);
    check_error(
        &format!("{p}&assetId={}", &party[2..]),
        10038,
        "invalid asset ID",
        None,
    );
    for name in [start, end] {
        for bad in ["abc", "1.5", "99999999999999999999", "1e9", "0x10"] {
            check_error(
                &format!("{p}&{name}={bad}"),
                10015,
                "malformed request",
                Some(name),
            );
        }
    }
    check_error(
        &format!("{p}&{start}=1690000002000000000&{end}=1690000001000000000"),
        10000,
        "invalid date range",
        None,
    );
    check_error(
        &format!("{p}&{start}=1&{end}=0"),
        10000,
        "invalid date range",
        None,
    );
}

#[test]
fn export_and_listing_refuse_other_methods_and_unknown_paths() {
    let addr = mixed().server.addr;
    let party = mixed().reference().largest_party();
    let post = |target: &str| {
        request(addr, "POST", target, &[("Content-Length", "0")])
            .and_then(Exchange::finish)
            .expect("POST")
    };
    let response = post(&format!("{EXPORT}?partyId={party}"));
    assert_eq!(response.status, 405, "{}", response.text());
    assert_eq!(response.json()["error"]["code"], json!(12));
    let response = post("/api/v2/oracle/data");
    assert_eq!(response.status, 405, "{}", response.text());
    assert_eq!(response.json()["code"], json!(12));
    for target in [
        "/",
        "/api/v2/nothing",
        "/api/v2/ledgerentry/export/x",
        "/api/v2/oracle",
    ] {
        let response = get(addr, target, &[]);
        assert_eq!(response.status, 404, "{target}");
        assert_eq!(
            response.json(),
            json!({"code": 5, "message": "Not Found", "details": []}),
            "{target}"
        );
    }
}

/// Opens the export at `target` and reads its head; a 503 (all export permits taken) is
/// retried until `deadline`.
///
/// Retrying, with a short pause, is deliberate: the server only learns that an abandoned
/// export's client left at its next write, so the permit comes back shortly after the client
/// hangs up, not at once. A leaked permit never comes back, and the deadline fails the test.
fn open_export(addr: std::net::SocketAddr, target: &str, refusals: &mut u32) -> Exchange {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let exchange = request(addr, "GET", target, &[]).expect("open export");
        match exchange.status {
            200 => return exchange,
            503 if Instant::now() < deadline => {
                *refusals += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            status => panic!(
                "{target}: status {status} after {refusals} refusals: \
                 an abandoned export kept its permit"
            ),
        }
    }
}

/// Descriptors open in this process (the tests and the servers), where the OS tells.
fn open_fds() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(Iterator::count)
}

#[test]
fn aborted_exports_release_their_permits_and_connections() {
    let set = whale();
    let reference = set.reference();
    // A second server over the same store with room for two exports: a leaked permit turns
    // every later export into a 503 within two rounds.
    let server = Server::start(
        set.dataset.store.clone(),
        AppConfig {
            max_concurrent_exports: 2,
            ..AppConfig::default()
        },
    );
    let whale_party = reference.largest_party();
    assert!(reference.entries_of(&whale_party).count() > 10_000);
    let whale_target = format!("{EXPORT}?partyId={whale_party}");
    let parties: Vec<String> = reference.parties().into_iter().collect();
    // Warm up so that the pool's idle readers are open before counting descriptors.
    drop(open_export(server.addr, &whale_target, &mut 0));
    let fds_before = open_fds();
    let started = Instant::now();
    let mut refusals = 0;
    for round in 0..200 {
        let mut exchange = open_export(server.addr, &whale_target, &mut refusals);
        let mut read = 0;
        while read < 4096 {
            let chunk = exchange
                .next_chunk()
                .expect("the export streams")
                .expect("the export is longer than 4 KiB");
            read += chunk.len();
        }
        // Hanging up with unread data resets the connection: the abrupt abort of a client
        // that gives up.
        drop(exchange);

        if round % 10 == 9 {
            let party = &parties[round / 10 % parties.len()];
            let asset = reference
                .assets_of(party)
                .into_iter()
                .next()
                .expect("asset");
            let filter = Filter {
                party,
                asset: Some(&asset),
                ..Filter::default()
            };
            let target = format!("{EXPORT}?{}", query(filter));
            let response = open_export(server.addr, &target, &mut refusals)
                .finish()
                .expect("a complete export");
            assert_same_text(response.text(), &reference.csv(filter), &target);
        }
    }

    let response = open_export(server.addr, &whale_target, &mut refusals)
        .finish()
        .expect("a complete export after the aborted ones");
    let whole = Filter {
        party: &whale_party,
        ..Filter::default()
    };
    assert_same_text(response.text(), &reference.csv(whole), &whale_target);
    let page = get(server.addr, "/api/v2/oracle/data?pagination.first=5", &[]);
    assert_eq!(page.status, 200, "{}", page.text());
    let nodes: Vec<Value> = page.json()["oracleData"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|edge| edge["node"].clone())
        .collect();
    let expected: Vec<Value> = reference
        .oracle_rows(None, true)
        .iter()
        .take(5)
        .map(|datum| datum.node.clone())
        .collect();
    assert_eq!(nodes, expected);
    let elapsed = started.elapsed();
    eprintln!("200 aborted exports: {elapsed:?}, {refusals} refusals");
    // Every abandoned export that kept its SQLite connection (or its socket) would hold at
    // least one descriptor; other tests running meanwhile account for a few dozen at most.
    if let (Some(before), Some(after)) = (fds_before, open_fds()) {
        assert!(
            after < before + 100,
            "open descriptors grew from {before} to {after} over 200 aborted exports"
        );
    }
    assert!(
        elapsed < Duration::from_secs(30),
        "aborted exports took {elapsed:?} ({refusals} refusals): they keep running after the client left"
    );
}

#[test]
fn export_sends_its_headers_and_csv_header_before_the_rows() {
    let set = whale();
    let party = set.reference().largest_party();
    let target = format!("{EXPORT}?partyId={party}");
    let started = Instant::now();
    let mut exchange = request(set.server.addr, "GET", &target, &[]).expect("open export");
    assert_eq!(exchange.status, 200);
    assert_eq!(exchange.header("content-type"), Some("text/csv"));
    let filter = Filter {
        party: &party,
        ..Filter::default()
    };
    assert_eq!(
        exchange.header("content-disposition"),
        Some(disposition(filter).as_str())
    );
    // Streamed: no length announced, the body comes in chunks, and the CSV header is a chunk
    // of its own, sent before any row is read.
    assert!(exchange.is_chunked(), "{:?}", exchange.headers);
    assert_eq!(exchange.header("content-length"), None);
    let first = exchange.next_chunk().expect("first chunk").expect("a body");
    assert_eq!(String::from_utf8(first).expect("UTF-8"), CSV_HEADER);
    let second = exchange.next_chunk().expect("second chunk").expect("rows");
    let expected = set.reference().csv(filter);
    assert!(
        expected.as_bytes()[CSV_HEADER.len()..].starts_with(&second),
        "the second chunk is not the start of the rows"
    );
    assert!(second.len() < expected.len() - CSV_HEADER.len());
    eprintln!("first two chunks after {:?}", started.elapsed());
}
