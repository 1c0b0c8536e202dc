use super::*;

#[test]
fn cpu_lists_are_parsed_like_the_kernel_writes_them() {
    assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
    assert_eq!(
        parse_cpu_list("0-2,8,10-11"),
        Some(vec![0, 1, 2, 8, 10, 11])
    );
    assert_eq!(parse_cpu_list("3"), Some(vec![3]));
    assert_eq!(parse_cpu_list(""), None);
    assert_eq!(parse_cpu_list("2-1"), None);
    assert_eq!(parse_cpu_list("a-b"), None);
}

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
    let config = relayd_config(
        SocketAddr::from(([127, 0, 0, 1], 4001)),
        SocketAddr::from(([127, 0, 0, 1], 4002)),
    );
    assert!(config.contains("[upstream]\n"));
    assert!(config.contains("openai_base_url = \"http://127.0.0.1:4001/v1\"\n"));
    assert!(config.contains("anthropic_base_url = \"http://127.0.0.1:4002\"\n"));
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

fn sample_report() -> Value {
    json!({
        "measures": [
            {
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
                "scenario": "memory",
                "measure": "relayd RSS with 1000 open streams",
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
    let rows = rows(&sample_report()).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].relay, Some(101.26));
    assert_eq!(rows[1].within_target, Some(false));
    assert_eq!(rows[2].direct, None);
    assert_eq!(rows[2].target, None);
    assert!(super::rows(&json!({"notes": []})).is_err());
    assert!(super::rows(&json!({"measures": [{"unit": "us"}]})).is_err());
}

#[test]
fn the_table_has_every_column_aligned() {
    let text = table(&rows(&sample_report()).unwrap());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5);
    assert!(lines[0].starts_with("| measure "));
    assert!(lines[0].contains("| within target |"));
    assert!(lines[1].starts_with("| ---"));
    let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
    assert!(widths.iter().all(|w| *w == widths[0]), "{text}");
    let cells = |line: &str| -> Vec<String> {
        line.trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    assert_eq!(
        cells(lines[2])[1..],
        ["101.3 µs", "48.0 µs", "53.3 µs", "added ≤ 60 µs", "yes"]
    );
    assert_eq!(
        cells(lines[3])[1..],
        [
            "9876 req/s",
            "12000 req/s",
            "-2124 req/s",
            "≥ 15000 req/s",
            "no"
        ]
    );
    assert_eq!(cells(lines[4])[1..], ["30.0 MiB", "-", "-", "-", "-"]);
    // Numbers are right-aligned.
    assert!(lines[2].contains("|   101.3 µs |"), "{text}");
    assert!(lines[4].contains("|   30.0 MiB |"), "{text}");
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
    let epoch = UtcStamp::from_unix(0);
    assert_eq!(epoch.rfc3339(), "1970-01-01T00:00:00Z");
    // 2000-02-29 (a leap day in a century year divisible by 400) at 12:34:56.
    let leap = UtcStamp::from_unix(951_827_696);
    assert_eq!(leap.rfc3339(), "2000-02-29T12:34:56Z");
    assert_eq!(leap.file_name(), "20000229T123456Z");
    // 2026-11-30T01:17:36Z.
    assert_eq!(
        UtcStamp::from_unix(1_796_001_456).rfc3339(),
        "2026-11-30T01:17:36Z"
    );
    // 2100-03-01, the day after a non-leap February in a century year.
    assert_eq!(
        UtcStamp::from_unix(4_107_542_400).rfc3339(),
        "2100-03-01T00:00:00Z"
    );
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
fn machine_ticks_count_everything_but_idle_as_busy() {
    let stat = "cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 50 2 25 400 10 1 1 5 3 0\nintr 1 2 3\n";
    // guest ticks are already inside user, so only the first eight columns count.
    assert_eq!(parse_proc_stat(stat), Some((990, 170)));
    assert_eq!(parse_proc_stat("intr 1 2\n"), None);
    assert_eq!(parse_proc_stat("cpu  1 x 3 4\n"), None);
}

#[test]
fn process_ticks_survive_a_name_with_spaces_and_parentheses() {
    let stat =
        "4242 (relay (x) d) S 1 4242 4242 0 -1 4194560 500 0 0 0 123 45 0 0 20 0 2 0 99 1000 200\n";
    assert_eq!(parse_pid_stat_ticks(stat), Some(168));
    assert_eq!(parse_pid_stat_ticks("4242 (short) S 1\n"), None);
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
fn process_ticks_with_children_add_cutime_and_cstime() {
    let stat =
        "4242 (relay (x) d) S 1 4242 4242 0 -1 4194560 500 0 0 0 123 45 7 3 20 0 2 0 99 1000 200\n";
    assert_eq!(parse_pid_stat_ticks_with_children(stat), Some(178));
    assert_eq!(parse_pid_state(stat), Some('S'));
    assert_eq!(parse_pid_state("9 (zombie) Z 1 9\n"), Some('Z'));
    assert_eq!(parse_pid_state("garbage"), None);
    assert_eq!(
        parse_pid_stat_ticks_with_children("4242 (short) S 1\n"),
        None
    );
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
