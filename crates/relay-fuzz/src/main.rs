//! `relay-fuzz`: runs the fuzz targets for a while each (what `cargo xtask fuzz` starts).
//!
//! `relay-fuzz [--secs N] [--seed N] [--out DIR] [TARGET...]` fuzzes each named target (all
//! when none is named) for N seconds from its seed corpus, writes one minimized input per
//! distinct crash under DIR, and exits 1 when any target crashed.
//! `relay-fuzz --replay TARGET FILE...` runs one target on the given files.
// A developer's tool, not a daemon or a hook: a panic on an unwritable stderr is fine here.
#![allow(clippy::disallowed_macros)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relay_fuzz::engine::{self, Options};
use relay_fuzz::{TARGETS, target};

const USAGE: &str = "usage: relay-fuzz [--secs N] [--seed N] [--out DIR] [TARGET...]\n       relay-fuzz --replay TARGET FILE...";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("relay-fuzz: {message}\n{USAGE}");
            ExitCode::from(64)
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    if let Some(("--replay", rest)) = args.split_first().map(|(a, r)| (a.as_str(), r)) {
        return replay(rest);
    }
    let mut secs = 60u64;
    let mut seed = None;
    let mut out = PathBuf::from("target/fuzz");
    let mut names = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--secs" => {
                secs = value("--secs")?
                    .parse()
                    .map_err(|_| "--secs takes a whole number of seconds".to_owned())?;
            }
            "--seed" => {
                seed = Some(
                    value("--seed")?
                        .parse::<u64>()
                        .map_err(|_| "--seed takes a number".to_owned())?,
                );
            }
            "--out" => out = PathBuf::from(value("--out")?),
            "-h" | "--help" => {
                println!("{USAGE}\ntargets: {}", names_of_targets());
                return Ok(ExitCode::SUCCESS);
            }
            flag if flag.starts_with('-') => return Err(format!("unknown flag {flag}")),
            name => {
                if target(name).is_none() {
                    return Err(format!(
                        "no target {name:?}; the targets are {}",
                        names_of_targets()
                    ));
                }
                names.push(name.to_owned());
            }
        }
    }
    if names.is_empty() {
        names = TARGETS.iter().map(|(name, _)| (*name).to_owned()).collect();
    }
    let seed = seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!(
        "relay-fuzz: {} target(s), {secs}s each, seed {seed}, crashes under {}",
        names.len(),
        out.display()
    );
    let mut crashed = 0;
    for name in &names {
        let Some(function) = target(name) else {
            continue;
        };
        let seeds = engine::load_corpus(&corpus_dir(name))
            .map_err(|error| format!("reading the {name} corpus: {error}"))?;
        let seeds: Vec<Vec<u8>> = seeds.into_iter().map(|(_, bytes)| bytes).collect();
        let options = Options {
            duration: Duration::from_secs(secs),
            seed,
            out: out.clone(),
        };
        let report = engine::fuzz(name, function, &seeds, &options)
            .map_err(|error| format!("writing a {name} crash: {error}"))?;
        println!(
            "{name}: {} runs from {} seeds, {} distinct crash(es), slowest run {:.1} ms{}",
            report.execs,
            report.seeds,
            report.crashes.len(),
            report.slowest.as_secs_f64() * 1000.0,
            if report.slow_inputs > 0 {
                format!(", {} runs over 1 s", report.slow_inputs)
            } else {
                String::new()
            }
        );
        for crash in &report.crashes {
            println!(
                "  crash at {}: {}\n    input ({} bytes): {}",
                crash.location,
                crash.message.lines().next().unwrap_or_default(),
                crash.input_len,
                crash.file.display()
            );
        }
        crashed += usize::from(!report.crashes.is_empty());
    }
    Ok(if crashed == 0 {
        ExitCode::SUCCESS
    } else {
        println!("relay-fuzz: {crashed} target(s) crashed");
        ExitCode::FAILURE
    })
}

fn replay(args: &[String]) -> Result<ExitCode, String> {
    let Some((name, files)) = args.split_first() else {
        return Err("--replay needs a target and files".to_owned());
    };
    let function = target(name).ok_or_else(|| format!("no target {name:?}"))?;
    let mut failed = false;
    for file in files {
        let bytes = std::fs::read(file).map_err(|error| format!("reading {file}: {error}"))?;
        match engine::run_one(function, &bytes) {
            Ok(()) => println!("{file}: ok"),
            Err(panic) => {
                failed = true;
                println!("{file}: panic at {}: {}", panic.location, panic.message);
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(name)
}

fn names_of_targets() -> String {
    TARGETS
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}
