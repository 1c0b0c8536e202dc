use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener},
    process::Command,
    thread,
};

use relay_testkit::measures::MeasureId;

use super::cpu::*;
use super::http::*;
use super::procs::*;
use super::report::*;
use super::*;

#[test]
fn two_cpus_give_the_load_generator_one_and_the_servers_the_other() {
    let pinning = Pinning::plan(Some(&[0, 1]), true);
    assert_eq!(pinning.loadgen.as_deref(), Some("0"));
    assert_eq!(pinning.stand_ins.as_deref(), Some("1"));
    assert_eq!(pinning.relayd.as_deref(), Some("1"));
    assert!(
        pinning.note.starts_with("pinned with taskset"),
        "{}",
        pinning.note
    );
}

#[test]
fn more_cpus_give_each_party_its_own() {
    let pinning = Pinning::plan(Some(&[2, 3, 4, 5]), true);
    assert_eq!(pinning.loadgen.as_deref(), Some("2"));
    assert_eq!(pinning.stand_ins.as_deref(), Some("3"));
    assert_eq!(pinning.relayd.as_deref(), Some("4,5"));
}

#[test]
fn pinning_is_skipped_and_said_so_when_it_cannot_be_done() {
    let no_taskset = Pinning::plan(Some(&[0, 1]), false);
    assert_eq!(no_taskset.relayd, None);
    assert_eq!(
        no_taskset.note,
        "processes are not pinned: taskset is not installed"
    );
    let one_cpu = Pinning::plan(Some(&[0]), true);
    assert_eq!(one_cpu.loadgen, None);
    assert_eq!(
        one_cpu.note,
        "processes are not pinned: only 1 CPU is available"
    );
    assert_eq!(Pinning::plan(None, true).stand_ins, None);
}

#[test]
fn a_pinned_command_runs_under_taskset() {
    let command = pinned_command(Path::new("/bin/relayd"), Some("1"));
    assert_eq!(command.get_program(), "taskset");
    let args: Vec<_> = command.get_args().collect();
    assert_eq!(args, ["-c", "1", "/bin/relayd"]);
    let plain = pinned_command(Path::new("/bin/relayd"), None);
    assert_eq!(plain.get_program(), "/bin/relayd");
    assert_eq!(plain.get_args().count(), 0);
}

#[test]
fn the_stand_in_address_is_read_from_its_first_line() {
    assert_eq!(
        parse_listening("listening 127.0.0.1:40123\n"),
        Some(SocketAddr::from(([127, 0, 0, 1], 40123)))
    );
    assert_eq!(parse_listening("error: address in use\n"), None);
    assert_eq!(parse_listening(""), None);
}

#[test]
fn relayd_config_points_both_families_at_the_stand_ins() {
    let mut upstreams = Upstreams::plain(
        SocketAddr::from(([127, 0, 0, 1], 4001)),
        SocketAddr::from(([127, 0, 0, 1], 4002)),
    );
    let config = relayd_config(&upstreams);
    assert!(config.contains("[upstream]\n"));
    assert!(config.contains("openai_base_url = \"http://127.0.0.1:4001/v1\"\n"));
    assert!(config.contains("anthropic_base_url = \"http://127.0.0.1:4002\"\n"));
    upstreams.trusted = Some(Path::new("/x/cert.pem"));
    let config = relayd_config(&upstreams);
    assert!(config.contains("openai_base_url = \"https://127.0.0.1:4001/v1\"\n"));
    assert!(config.contains("anthropic_base_url = \"https://127.0.0.1:4002\"\n"));
}

#[test]
fn a_free_port_is_not_zero() {
    assert_ne!(free_port().unwrap(), 0);
}

#[test]
fn nothing_listening_is_not_healthy() {
    let port = free_port().unwrap();
    assert!(!is_relayd_healthy(SocketAddr::from(([127, 0, 0, 1], port))));
}

#[test]
fn a_listener_that_is_not_relayd_is_not_healthy() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0_u8; 512];
        let _ = stream.read(&mut request).unwrap();
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 15\r\n\r\n{\"service\":\"x\"}")
            .unwrap();
    });
    assert!(!is_relayd_healthy(addr));
    server.join().unwrap();
}

/// A one-connection TLS server with `tls`'s certificate that answers `answer` to the first request.
fn tls_server_answering(
    tls: &TlsFiles,
    answer: &'static [u8],
) -> (SocketAddr, thread::JoinHandle<()>) {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&tls.key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let config = std::sync::Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let connection = rustls::ServerConnection::new(config).unwrap();
        let mut stream = rustls::StreamOwned::new(connection, tcp);
        let mut request = Vec::new();
        let mut chunk = [0_u8; 512];
        // A client that refuses the certificate ends the handshake, and these reads with it.
        while !request.ends_with(b"\r\n\r\n") {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(read) => request.extend_from_slice(&chunk[..read]),
            }
        }
        stream.write_all(answer).unwrap();
        stream.conn.send_close_notify();
        stream.flush().unwrap();
    });
    (addr, server)
}

#[test]
fn a_relayd_serving_https_is_healthy_only_behind_a_trusted_certificate() {
    let scratch = Scratch::create().unwrap();
    let served = TlsFiles::make(&scratch.path("served"), &["127.0.0.1"]).unwrap();
    let other = TlsFiles::make(&scratch.path("other"), &["127.0.0.1"]).unwrap();
    let relayd_answer: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-length: 21\r\n\r\n{\"service\":\"relayd\"}";

    let (addr, server) = tls_server_answering(&served, relayd_answer);
    assert!(is_relayd_healthy_over_tls(addr, &served.cert));
    server.join().unwrap();

    // The same answer behind a certificate the bench did not make is not its relayd.
    let (addr, server) = tls_server_answering(&served, relayd_answer);
    assert!(!is_relayd_healthy_over_tls(addr, &other.cert));
    server.join().unwrap();

    // Nor is plain HTTP where HTTPS was asked for.
    let port = free_port().unwrap();
    assert!(!is_relayd_healthy_over_tls(
        SocketAddr::from(([127, 0, 0, 1], port)),
        &served.cert
    ));
}

#[test]
fn nginx_serving_https_beside_relayd_terminates_tls_before_the_plain_stand_in() {
    let tls = TlsFiles {
        cert: "/x/served/cert.pem".into(),
        key: "/x/served/key.pem".into(),
    };
    let config = nginx::config(
        Path::new("/x/peer"),
        4200,
        nginx::Site::PeerServingHttps {
            upstream: SocketAddr::from(([127, 0, 0, 1], 4001)),
            tls: &tls,
        },
        nginx::Layout::Workers(1),
        false,
    );
    assert!(config.contains("listen 127.0.0.1:4200 ssl http2;"));
    assert!(config.contains("ssl_certificate /x/served/cert.pem;"));
    assert!(config.contains("ssl_certificate_key /x/served/key.pem;"));
    assert!(config.contains("ssl_protocols TLSv1.2 TLSv1.3;"));
    assert!(config.contains("proxy_pass http://origin;"));
    assert!(config.contains("server 127.0.0.1:4001;"));
}

fn sample_report() -> Value {
    json!({
        "measures": [
            {
                "id": "latency_p50",
                "scenario": "latency",
                "measure": "added latency, non-streaming, pass-through, c=1, p50",
                "unit": "us",
                "relay": 101.26,
                "direct": 48.0,
                "added": 53.26,
                "target": "added ≤ 60 µs",
                "within_target": true
            },
            {
                "id": "throughput_rate",
                "scenario": "throughput",
                "measure": "throughput, c=64, tiny responses, pass-through",
                "unit": "req/s",
                "relay": 9876.4,
                "direct": 12000.2,
                "added": -2123.8,
                "target": "≥ 15000 req/s",
                "within_target": false
            },
            {
                "id": "relayd_rss_streams",
                "scenario": "memory",
                "measure": "relayd RSS with the held streams open",
                "unit": "MiB",
                "relay": 30.04,
                "direct": null,
                "added": null,
                "target": null,
                "within_target": null
            }
        ],
        "notes": []
    })
}

#[test]
fn rows_are_read_from_the_loadgen_report() {
    let rows = measures(&sample_report()).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].relay, 101.26);
    assert_eq!(rows[1].within_target, Some(false));
    assert_eq!(rows[2].direct, None);
    assert_eq!(rows[2].target, None);
    assert!(measures(&json!({"notes": []})).is_err());
    assert!(measures(&json!({"measures": [{"unit": "us"}]})).is_err());
}

/// The cells of one table line.
fn cells(line: &str) -> Vec<String> {
    line.trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_owned())
        .collect()
}

#[test]
fn the_table_has_every_measure_in_order_and_every_column_aligned() {
    let rows = table_rows(measures(&sample_report()).unwrap());
    assert_eq!(rows.len(), relay_testkit::measures::MEASURES.len());
    let text = table(&rows);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 + rows.len());
    assert!(lines[0].starts_with("| measure "));
    assert!(lines[0].contains("| within target |"));
    assert!(lines[0].contains("| nginx |"));
    assert!(lines[0].ends_with("| CPU vs nginx |"));
    assert!(lines[1].starts_with("| ---"));
    let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
    assert!(widths.iter().all(|w| *w == widths[0]), "{text}");
    let line_of = |name: &str| -> Vec<String> {
        let line = lines
            .iter()
            .find(|l| cells(l)[0] == name)
            .unwrap_or_else(|| panic!("no row {name}:\n{text}"));
        cells(line)
    };
    assert_eq!(
        line_of("added latency, non-streaming, pass-through, c=1, p50")[1..7],
        [
            "101.3 µs",
            "48.0 µs",
            "53.3 µs",
            "-",
            "added ≤ 60 µs",
            "yes"
        ]
    );
    assert_eq!(
        line_of("throughput, c=64, tiny responses, pass-through")[1..7],
        [
            "9876 req/s",
            "12000 req/s",
            "-2124 req/s",
            "-",
            "≥ 15000 req/s",
            "no"
        ]
    );
    assert_eq!(
        line_of("relayd RSS with the held streams open")[1..7],
        ["30.0 MiB", "-", "-", "-", "-", "-"]
    );
    // A measure of the table that did not run is still listed, beside its target.
    let missing = line_of("concurrent open SSE streams without a lost or late frame");
    assert_eq!(missing[1], "not measured");
    assert_eq!(missing[6], "-");
    assert_eq!(missing[5], "≥ 5000");
    // The table's order is SPEC §12's: p50 before p99, pass-through before the worker.
    let position = |name: &str| lines.iter().position(|l| cells(l)[0] == name).unwrap();
    assert!(
        position("added latency, non-streaming, pass-through, c=1, p50")
            < position("added latency through the worker, plugins off, c=1, p99")
    );
    // Numbers are right-aligned.
    assert!(
        text.contains(" 101.3 µs |") && !text.contains("101.3 µs  "),
        "{text}"
    );
}

#[test]
fn cpu_and_peer_columns_show_nginx_and_the_ratio() {
    let report = json!({"measures": [{
        "id": "cpu_pass_through",
        "scenario": "throughput",
        "measure": "CPU per proxied request, pass-through, c=64 (peer: nginx)",
        "unit": "us",
        "relay": 70.0,
        "direct": null,
        "added": null,
        "peer": 35.0,
        "cpu": {"relay_us": 70.0, "peer_us": 35.0, "ratio": 2.0},
        "target": "≤ nginx",
        "within_target": null,
    }]});
    let rows = table_rows(measures(&report).unwrap());
    let row = rows
        .iter()
        .find(|(spec, _)| spec.id == MeasureId::CpuPassThrough)
        .unwrap();
    // Judged again from the table: 70 µs is more than nginx's 35 µs.
    assert_eq!(row.1.as_ref().unwrap().within_target, Some(false));
    let text = table(&rows);
    let line = text
        .lines()
        .find(|l| l.contains("CPU per proxied request"))
        .unwrap();
    assert_eq!(
        cells(line)[1..],
        [
            "70.0 µs",
            "-",
            "-",
            "35.0 µs",
            "≤ nginx",
            "no",
            "70.0 µs",
            "35.0 µs",
            "2.00×"
        ]
    );
    let json = rows_json(&rows).unwrap();
    let listed: Vec<&Value> = json.as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), rows.len());
    let cpu = listed
        .iter()
        .find(|r| r["id"] == "cpu_pass_through")
        .unwrap();
    assert_eq!(cpu["measured"], true);
    assert!(cpu["how"].as_str().unwrap().contains("nginx"));
    let atof = listed
        .iter()
        .find(|r| r["id"] == "worker_latency_atof_p99")
        .unwrap();
    assert_eq!(atof["measured"], false);
    assert_eq!(atof["target"], "added ≤ 600 µs");
}

#[test]
fn values_are_formatted_by_unit() {
    assert_eq!(format_value(Some(3.0), "count"), "3");
    assert_eq!(format_value(Some(1.234), "ms"), "1.23 ms");
    assert_eq!(format_value(Some(12.34), "KiB"), "12.3 KiB");
    assert_eq!(format_value(None, "us"), "-");
    assert_eq!(format_value(Some(2.0), "widgets"), "2.00 widgets");
}

#[test]
fn timestamps_are_utc_calendar_dates() {
    assert_eq!(
        stamp(0).unwrap(),
        (
            "1970-01-01T00:00:00Z".to_owned(),
            "19700101T000000Z".to_owned()
        )
    );
    // 2000-02-29 (a leap day in a century year divisible by 400) at 12:34:56.
    let leap = stamp(951_827_696).unwrap();
    assert_eq!(leap.0, "2000-02-29T12:34:56Z");
    assert_eq!(leap.1, "20000229T123456Z");
    assert_eq!(stamp(1_796_001_456).unwrap().0, "2026-11-30T01:17:36Z");
    // 2100-03-01, the day after a non-leap February in a century year.
    assert_eq!(stamp(4_107_542_400).unwrap().0, "2100-03-01T00:00:00Z");
}

#[test]
fn options_select_scenarios_and_refuse_unknown_ones() {
    let all = Options::parse(&[]).unwrap();
    assert!(!all.quick && !all.unpinned && all.selected("throughput") && all.selected("hook"));
    assert!(Options::parse(&["--unpinned".to_owned()]).unwrap().unpinned);
    assert!(!all.pgo && Options::parse(&["--pgo".to_owned()]).unwrap().pgo);
    assert_eq!(Pinning::detect(true).relayd, None);
    assert!(all.scale_args().is_empty());
    let args: Vec<String> = [
        "--quick",
        "--only",
        "throughput",
        "--only",
        "worker-throughput",
    ]
    .map(str::to_owned)
    .to_vec();
    let some = Options::parse(&args).unwrap();
    assert!(some.quick);
    assert!(some.selected("throughput") && some.selected("worker-throughput"));
    assert!(!some.selected("latency") && !some.selected("activation"));
    assert_eq!(some.scale_args(), ["--scale", QUICK_SCALE]);
    assert_eq!(some.selected_of(&PASS_THROUGH_SCENARIOS), ["throughput"]);
    let unknown = Options::parse(&["--only".to_owned(), "speed".to_owned()]).unwrap_err();
    assert!(
        unknown.to_string().contains("unknown scenario"),
        "{unknown}"
    );
    assert!(Options::parse(&["--only".to_owned()]).is_err());
    assert!(Options::parse(&["--fast".to_owned()]).is_err());
}

#[test]
fn the_nginx_config_stays_in_its_directory_and_keeps_upstream_connections() {
    let config = nginx::config(
        Path::new("/tmp/relay-bench-1/nginx"),
        4100,
        nginx::Site::Peer(SocketAddr::from(([127, 0, 0, 1], 4001))),
        nginx::Layout::Workers(2),
        true,
    );
    assert!(config.contains("daemon off;\n"));
    assert!(config.contains("master_process on;\n"));
    assert!(config.contains("worker_processes 2;\n"));
    assert!(config.contains("user root;\n"));
    assert!(config.contains("listen 127.0.0.1:4100;"));
    assert!(config.contains("server 127.0.0.1:4001;"));
    assert!(config.contains("keepalive 128;"));
    assert!(config.contains("proxy_http_version 1.1;"));
    assert!(config.contains("proxy_set_header Connection \"\";"));
    assert!(config.contains("access_log off;"));
    // Every path nginx writes is inside its scratch directory: nothing under /etc/nginx or /var.
    for line in config.lines() {
        if let Some(path) = line
            .split_whitespace()
            .find(|w| w.starts_with('/') && w.len() > 1)
        {
            assert!(path.starts_with("/tmp/relay-bench-1/nginx/"), "{line}");
        }
    }
    assert!(
        !nginx::config(
            Path::new("/x"),
            1,
            nginx::Site::Peer(SocketAddr::from(([127, 0, 0, 1], 2))),
            nginx::Layout::Workers(1),
            false
        )
        .contains("user ")
    );
    // Alone, one process serves, so that valgrind counts all of nginx's work.
    let alone = nginx::config(
        Path::new("/x"),
        1,
        nginx::Site::Peer(SocketAddr::from(([127, 0, 0, 1], 2))),
        nginx::Layout::Alone,
        false,
    );
    assert!(alone.contains("master_process off;\nworker_processes 1;\n"));
}

#[test]
fn nginx_as_an_https_provider_offers_http2_and_its_peer_verifies_it() {
    let stand_in = SocketAddr::from(([127, 0, 0, 1], 4001));
    let tls = TlsFiles {
        cert: "/x/tls/cert.pem".into(),
        key: "/x/tls/key.pem".into(),
    };
    let front = nginx::config(
        Path::new("/x/front"),
        4443,
        nginx::Site::TlsFront {
            upstream: stand_in,
            tls: &tls,
        },
        nginx::Layout::Workers(1),
        false,
    );
    assert!(front.contains("listen 127.0.0.1:4443 ssl http2;"));
    assert!(front.contains("ssl_certificate /x/tls/cert.pem;"));
    assert!(front.contains("ssl_certificate_key /x/tls/key.pem;"));
    assert!(front.contains("ssl_protocols TLSv1.2 TLSv1.3;"));
    assert!(front.contains("proxy_pass http://origin;"));
    assert!(front.contains("server 127.0.0.1:4001;"));
    let peer = nginx::config(
        Path::new("/x/peer"),
        4100,
        nginx::Site::PeerOfTls {
            upstream: SocketAddr::from(([127, 0, 0, 1], 4443)),
            trusted: Path::new("/x/tls/cert.pem"),
        },
        nginx::Layout::Workers(1),
        false,
    );
    assert!(peer.contains("listen 127.0.0.1:4100;"));
    assert!(peer.contains("proxy_pass https://origin;"));
    assert!(peer.contains("server 127.0.0.1:4443;"));
    assert!(peer.contains("proxy_ssl_trusted_certificate /x/tls/cert.pem;"));
    assert!(peer.contains("proxy_ssl_verify on;"));
    assert!(peer.contains("proxy_ssl_name localhost;"));
    assert!(peer.contains("proxy_ssl_session_reuse on;"));
    assert!(peer.contains("keepalive 128;"));
}

#[test]
fn the_server_cpu_count_follows_relayd_s_pinning() {
    let pinning = Pinning::plan(Some(&[2, 3, 4, 5]), true);
    assert_eq!(pinning.server_cpu_count(), 2);
    assert_eq!(Pinning::plan(Some(&[0, 1]), true).server_cpu_count(), 1);
    assert!(Pinning::plan(None, false).server_cpu_count() >= 1);
}

#[test]
fn a_process_is_killed_when_its_handle_drops() {
    let mut command = Command::new("sleep");
    command.arg("600");
    let process = Process::spawn("sleep", command).unwrap();
    let pid = process.pid();
    drop(process);
    // Reaped by the drop, so no /proc entry remains (a zombie would still have one).
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn the_scratch_directory_is_removed_on_drop() {
    let scratch = Scratch::create().unwrap();
    let dir = scratch.dir.clone();
    let (path, _file) = scratch.log("x.stderr").unwrap();
    assert!(path.is_file());
    drop(scratch);
    assert!(!dir.exists());
}

#[test]
fn other_load_is_what_the_bench_did_not_use() {
    let before = CpuSnapshot {
        total: 1000,
        busy: 300,
        ours: 100,
    };
    let after = CpuSnapshot {
        total: 3000,
        busy: 1800,
        ours: 700,
    };
    // 1500 busy ticks, 600 by the servers and 400 by the loadgen: 500 of 2000 by others.
    assert_eq!(other_cpu_share(&before, &after, 400), Some(0.25));
    assert_eq!(other_cpu_share(&after, &before, 0), None);
    assert_eq!(other_cpu_share(&before, &before, 0), None);
}

#[test]
fn own_process_ticks_are_readable() {
    let snapshot = CpuSnapshot::take(&[std::process::id()]).unwrap();
    assert!(snapshot.total >= snapshot.busy && snapshot.busy > 0);
}

#[test]
fn a_small_other_load_is_not_given_a_precise_figure() {
    assert_eq!(
        other_load_note("worker measures", Some(0.0)),
        "worker measures: other processes used under 5% of the CPUs (the estimate is good to a few percent)"
    );
    assert!(other_load_note("x", Some(0.31)).contains("about 31% busy"));
    assert!(other_load_note("x", None).contains("unknown"));
}

#[test]
fn responses_are_parsed_with_plain_and_chunked_bodies() {
    assert_eq!(
        parse_response("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"),
        Some((200, "{}".to_owned()))
    );
    assert_eq!(
        parse_response(
            "HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nrela\r\n2;x=y\r\nyd\r\n0\r\n\r\n"
        ),
        Some((401, "relayd".to_owned()))
    );
    assert_eq!(parse_response("HTTP/1.0 200 OK\r\n\r\n"), None);
    assert_eq!(parse_response("HTTP/1.1 200 OK\r\n"), None);
    // A chunk cut short is not a body.
    assert_eq!(
        parse_response("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\nabc"),
        None
    );
}

#[test]
fn a_get_reaches_a_local_server_with_the_credential() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0_u8; 512];
        while !request.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut buf).unwrap();
            request.extend_from_slice(&buf[..n]);
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nfine")
            .unwrap();
        String::from_utf8(request).unwrap()
    });
    let answer = http_get(addr, "/_relay/v1/route", Some("tok")).unwrap();
    assert_eq!(answer, (200, "fine".to_owned()));
    let request = server.join().unwrap();
    assert!(
        request.starts_with("GET /_relay/v1/route HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request.contains("\r\nx-relay-client-token: tok\r\n"),
        "{request}"
    );
}

#[test]
fn a_callgrind_dump_gives_its_instruction_total() {
    let dump = "version: 1\ncreator: callgrind-3.19.0\npid: 14714\ncmd:  relayd --pass-through\npart: 1\n\npositions: line\nevents: Ir\nsummary: 102207402\n\nfn=(1) main\n16 3\n\ntotals: 102207402\n";
    assert_eq!(instructions::totals(dump), Some(102_207_402));
    assert_eq!(instructions::totals("summary: 7\n"), Some(7));
    assert_eq!(instructions::totals("events: Ir\n"), None);
}

#[test]
fn a_wrapper_runs_the_program_as_its_last_argument() {
    let wrapper = ["valgrind".into(), "--tool=callgrind".into()];
    let command = wrapped_command(&wrapper, Path::new("/bin/relayd"), Some("1"));
    let args: Vec<_> = command.get_args().collect();
    assert_eq!(command.get_program(), "taskset");
    assert_eq!(
        args,
        ["-c", "1", "valgrind", "--tool=callgrind", "/bin/relayd"]
    );
    let bare = wrapped_command(&[], Path::new("/bin/relayd"), None);
    assert_eq!(bare.get_program(), "/bin/relayd");
    assert_eq!(bare.get_args().count(), 0);
}

#[test]
fn a_wrapper_script_runs_the_program_with_its_own_arguments_whatever_the_quotes() {
    let dir = Scratch::create().unwrap();
    let script = instructions::wrapper_script(
        &["printf".into(), "<%s>".into()],
        Path::new("/odd dir/it's \"here\" $HOME"),
    )
    .unwrap();
    let path = dir.path("wrapper");
    std::fs::write(&path, script).unwrap();
    let output = Command::new("sh")
        .arg(&path)
        .args(["one two", "'three'"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "</odd dir/it's \"here\" $HOME><one two><'three'>"
    );
}

#[test]
fn an_https_row_shows_no_direct_path() {
    // The load generator measures none for it: it cannot reach the provider over TLS.
    let measured = relay_testkit::measures::Measure::new(MeasureId::ThroughputRate, 23_548.0, None)
        .with_peer(Some(27_920.0));
    let https = measured.as_row(MeasureId::HttpsThroughputRate);
    assert_eq!((https.direct, https.added), (None, None));
    assert_eq!((https.relay, https.peer), (23_548.0, Some(27_920.0)));
    let rows = table(&table_rows(vec![https]));
    let line = rows.lines().find(|l| l.contains("HTTPS provider")).unwrap();
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    assert_eq!((cells[3], cells[4]), ("-", "-"), "{line}");
}
