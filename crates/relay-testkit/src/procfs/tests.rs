use super::*;

#[test]
fn machine_ticks_count_everything_but_idle_as_busy() {
    let stat = "cpu  100 5 50 800 20 3 2 10 7 0\ncpu0 50 2 25 400 10 1 1 5 3 0\nintr 1 2 3\n";
    // guest ticks are already inside user, so only the first eight columns count.
    assert_eq!(
        MachineTicks::parse(stat),
        Some(MachineTicks {
            total: 990,
            busy: 170,
            steal: 10
        })
    );
    // A kernel older than steal accounting has seven columns.
    assert_eq!(
        MachineTicks::parse("cpu  100 5 50 800 20 3 2\n").map(|t| t.steal),
        Some(0)
    );
    assert_eq!(MachineTicks::parse("intr 1 2\n"), None);
    assert_eq!(MachineTicks::parse("cpu  1 x 3 4\n"), None);
}

#[test]
fn process_ticks_survive_a_name_with_spaces_and_parentheses() {
    let stat =
        "4242 (relay (x) d) S 1 4242 4242 0 -1 4194560 500 0 0 0 123 45 0 0 20 0 2 0 99 1000 200\n";
    assert_eq!(PidStat::parse(stat).map(|s| s.ticks()), Some(168));
    assert_eq!(PidStat::parse("4242 (short) S 1\n"), None);
}

#[test]
fn cpu_ticks_are_utime_plus_stime() {
    let stat = "77 (relay-loadgen) R 1 77 77 0 -1 4194304 900 0 0 0 250 31 0 0 20 0 1 0 5 100 50\n";
    assert_eq!(PidStat::parse(stat).map(|s| s.ticks()), Some(281));
    assert_eq!(PidStat::parse("77 (x) R\n"), None);
    assert!(PidStat::read_self().is_some());
}

#[test]
fn process_ticks_with_children_add_cutime_and_cstime() {
    let stat =
        "4242 (relay (x) d) S 1 4242 4242 0 -1 4194560 500 0 0 0 123 45 7 3 20 0 2 0 99 1000 200\n";
    let parsed = PidStat::parse(stat).unwrap();
    assert_eq!(parsed.ticks_with_children(), 178);
    assert_eq!(parsed.state, 'S');
    assert!(!parsed.is_dead());
    let zombie = PidStat::parse("9 (zombie) Z 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20\n").unwrap();
    assert_eq!(zombie.state, 'Z');
    assert!(zombie.is_dead());
    assert_eq!(PidStat::parse("garbage"), None);
}

#[test]
fn ticks_of_several_processes_are_summed() {
    let own = std::process::id();
    let one = ticks_of(&[own]).unwrap();
    let two = ticks_of(&[own, own]).unwrap();
    assert!(two >= 2 * one);
    assert_eq!(ticks_of(&[]), Some(0));
    assert_eq!(ticks_to_duration(3), Duration::from_millis(30));
}

#[test]
fn preemptions_are_read_from_each_thread_and_summed() {
    let status =
        "Name:\trelayd\nvoluntary_ctxt_switches:\t1700\nnonvoluntary_ctxt_switches:\t66336\n";
    assert_eq!(parse_preemptions(status), Some(66336));
    assert_eq!(parse_preemptions("Name:\tzombie\n"), None);
    let own = std::process::id();
    let one = preemptions_of(&[own]).unwrap();
    assert!(preemptions_of(&[own, own]).unwrap() >= 2 * one);
    assert_eq!(preemptions_of(&[u32::MAX]), None);
}

#[test]
fn vm_rss_is_read_in_bytes() {
    let status = "Name:\trelayd\nVmPeak:\t  99999 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
    assert_eq!(parse_vm_rss(status), Some(12345 * 1024));
    assert_eq!(parse_vm_rss("Name:\tzombie\n"), None);
    assert_eq!(parse_vm_rss("VmRSS:\t12 MB\n"), None);
    assert_eq!(parse_vm_rss("VmRSS:\tlots kB\n"), None);
}

#[test]
fn own_rss_is_readable() {
    let rss = rss_bytes(std::process::id()).unwrap();
    assert!(rss > 1024 * 1024, "{rss}");
}

#[test]
fn status_fields_and_the_effective_uid_are_read() {
    let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nCpus_allowed_list:\t0-1\n";
    assert_eq!(status_field(status, "Cpus_allowed_list"), Some("0-1"));
    assert_eq!(status_field(status, "Cpus"), None);
    assert_eq!(parse_effective_uid(status), Some(0));
    assert_eq!(parse_effective_uid("Uid:\t7\n"), None);
    assert!(own_effective_uid().is_some());
    assert!(own_cpus().is_some_and(|cpus| !cpus.is_empty()));
}

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
fn hard_open_file_limit_is_parsed() {
    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                  Max cpu time              unlimited            unlimited            seconds   \n\
                  Max open files            1024                 524288               files     \n";
    assert_eq!(parse_hard_open_files(limits), Some(Some(524_288)));
    let unlimited = "Max open files            1024                 unlimited            files\n";
    assert_eq!(parse_hard_open_files(unlimited), Some(None));
    assert_eq!(parse_hard_open_files("Max processes 1 2 processes\n"), None);
}

#[test]
fn program_names_come_from_the_first_cmdline_argument() {
    assert_eq!(
        program_name(b"/usr/lib/relay/relay-worker\0--daemon-address\0x\0"),
        Some("relay-worker".to_owned())
    );
    assert_eq!(program_name(b""), None);
    let child = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(children(std::process::id()).contains(&pid));
    assert!(program_of(std::process::id()).is_some());
    let mut child = child;
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_program_is_found_itself_or_as_a_wrappers_argument() {
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};
    // `timeout` stays the parent of the `cat` it runs, with `cat` among its arguments. A line
    // echoed back proves `cat` runs, so `timeout` has replaced the forked test process by
    // then: right after a fork, the child's command line is still the test's own.
    let mut wrapper = Command::new("timeout")
        .args(["5", "/bin/cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = wrapper.stdin.take().unwrap();
    stdin.write_all(b"ready\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(wrapper.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let pid = wrapper.id();
    assert!(runs_program(pid, "timeout"));
    assert!(runs_program(pid, "cat"));
    assert!(!runs_program(pid, "relay-worker"));
    assert!(!runs_program(pid, "ca"));
    // `cat` ends at the end of its input.
    drop(stdin);
    assert!(wrapper.wait().unwrap().success());
    assert!(!runs_program(u32::MAX, "cat"));
}
