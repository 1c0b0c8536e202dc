//! A small mutation fuzzer for the stable toolchain: it takes a target's seed corpus, mutates
//! inputs at random (bit and byte changes, insertions, deletions, duplications, splices of two
//! seeds, and tokens of the formats Relay parses), runs the target on each under
//! `catch_unwind`, and keeps one minimized input per distinct panic location.
//!
//! It has no coverage feedback: it explores around the seeds, so the seeds matter.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use crate::Target;

/// Mutated inputs are cut to this length, which keeps each run short; the frame and head limits
/// beyond it are reached only by corpus files that long.
pub const MAX_INPUT_LEN: usize = 16 * 1024;

/// One run slower than this is reported.
const SLOW: Duration = Duration::from_secs(1);

/// How long one target runs, from which seed, and where its crashes go.
#[derive(Debug, Clone)]
pub struct Options {
    pub duration: Duration,
    pub seed: u64,
    /// Where crashes are written: `<out>/<target>/crash-<hash>` with a `.txt` beside it.
    pub out: PathBuf,
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub execs: u64,
    pub seeds: usize,
    pub crashes: Vec<Crash>,
    /// The slowest input and how long it took.
    pub slowest: Duration,
    pub slow_inputs: u64,
}

/// One distinct panic: where it happened, what it said, and the minimized input that causes it.
#[derive(Debug, Clone)]
pub struct Crash {
    pub location: String,
    pub message: String,
    pub file: PathBuf,
    pub input_len: usize,
}

/// Why a target panicked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panic {
    /// `file:line:column` of the panic.
    pub location: String,
    pub message: String,
}

std::thread_local! {
    /// Set while [`run_one`] runs a target on this thread; its panics are kept here.
    static CAPTURE: std::cell::RefCell<Option<Option<Panic>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `target` on `input`; a panic is caught and returned instead of printed.
pub fn run_one(target: Target, input: &[u8]) -> Result<(), Panic> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let capturing = CAPTURE.with(|capture| capture.borrow().is_some());
            if !capturing {
                return previous(info);
            }
            let location = info.location().map_or_else(String::new, |l| {
                format!("{}:{}:{}", l.file(), l.line(), l.column())
            });
            let message = if let Some(s) = info.payload().downcast_ref::<&str>() {
                (*s).to_owned()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "panic with a non-string payload".to_owned()
            };
            CAPTURE.with(|capture| *capture.borrow_mut() = Some(Some(Panic { location, message })));
        }));
    });
    CAPTURE.with(|capture| *capture.borrow_mut() = Some(None));
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| target(input)));
    let caught = CAPTURE
        .with(|capture| capture.borrow_mut().take())
        .flatten();
    match outcome {
        Ok(()) => Ok(()),
        Err(_) => Err(caught.unwrap_or_else(|| Panic {
            location: String::new(),
            message: "panic".to_owned(),
        })),
    }
}

/// The files of a corpus directory, sorted by name; none when it does not exist.
pub fn load_corpus(dir: &Path) -> io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.is_file() {
            let bytes = fs::read(&path)?;
            files.push((path, bytes));
        }
    }
    files.sort();
    Ok(files)
}

/// Fuzzes `target` (called `name`) from `seeds` for `options.duration`.
pub fn fuzz(
    name: &str,
    target: Target,
    seeds: &[Vec<u8>],
    options: &Options,
) -> io::Result<Report> {
    let mut rng = Rng::new(options.seed);
    let mut pool: Vec<Vec<u8>> = seeds.to_vec();
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let mut report = Report {
        seeds: seeds.len(),
        ..Report::default()
    };
    let mut found: BTreeMap<String, Crash> = BTreeMap::new();
    let dictionary = dictionary(name);
    let started = Instant::now();
    while started.elapsed() < options.duration {
        // A batch between clock reads.
        for _ in 0..64 {
            let input = mutate(&mut rng, &pool, dictionary);
            let run_started = Instant::now();
            let outcome = run_one(target, &input);
            let took = run_started.elapsed();
            report.execs += 1;
            report.slowest = report.slowest.max(took);
            if took > SLOW {
                report.slow_inputs += 1;
            }
            if let Err(panic) = outcome {
                if found.contains_key(&panic.location) {
                    continue;
                }
                let input = minimize(target, &input, &panic.location);
                let file = save(&options.out, name, &input, &panic)?;
                found.insert(
                    panic.location.clone(),
                    Crash {
                        location: panic.location,
                        message: panic.message,
                        file,
                        input_len: input.len(),
                    },
                );
            }
        }
    }
    report.crashes = found.into_values().collect();
    Ok(report)
}

/// Removes spans of `input` while the target still panics at `location` (a bounded number of
/// tries), so a reproducer is small enough to read.
pub fn minimize(target: Target, input: &[u8], location: &str) -> Vec<u8> {
    let mut best = input.to_vec();
    let mut tries = 0;
    let mut span = best.len().div_ceil(2).max(1);
    while span >= 1 && tries < 4000 {
        let mut at = 0;
        let mut shrunk = false;
        while at < best.len() && tries < 4000 {
            let end = (at + span).min(best.len());
            let candidate: Vec<u8> = best[..at].iter().chain(&best[end..]).copied().collect();
            tries += 1;
            match run_one(target, &candidate) {
                Err(panic) if panic.location == location => {
                    best = candidate;
                    shrunk = true;
                }
                _ => at += span,
            }
        }
        if !shrunk {
            if span == 1 {
                break;
            }
            span /= 2;
        }
    }
    best
}

fn save(out: &Path, name: &str, input: &[u8], panic: &Panic) -> io::Result<PathBuf> {
    let dir = out.join(name);
    fs::create_dir_all(&dir)?;
    let file = dir.join(format!("crash-{:016x}", fnv1a(input)));
    fs::write(&file, input)?;
    fs::write(
        file.with_extension("txt"),
        format!("{}\n{}\n", panic.location, panic.message),
    )?;
    Ok(file)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Tokens of the formats a target parses, inserted or written over inputs.
fn dictionary(name: &str) -> &'static [&'static [u8]] {
    match name {
        "http1_watcher" => &[
            b"\r\n",
            b"\n",
            b"\r\n\r\n",
            b"\n\n",
            b"POST / HTTP/1.1\r\n",
            b"GET / HTTP/1.1\n",
            b"Content-Length: 5\r\n",
            b"Content-Length: 0\r\n",
            b"content-length:5\n",
            b"Transfer-Encoding: chunked\r\n",
            b"transfer-encoding: chunked\n",
            b"Transfer-Encoding: gzip, chunked\r\n",
            b"Upgrade: websocket\r\n",
            b"0\r\n\r\n",
            b"5\r\nhello\r\n",
            b";ext=1",
            b"Host: x\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b" ",
            b"\t",
            b",",
        ],
        "frame_decode" => &[
            b"\x52\x45\x00\x01",
            b"\x52\x45\x00\x01\x00\x01",
            b"\x00",
            b"\x01",
            b"\x7f",
            b"\x80",
            b"\xff",
            b"\xff\xff\xff\xff\x0f",
            b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
        ],
        "mcp_line" | "hook_event" | "hook_payload" => &[
            b"{",
            b"}",
            b"[",
            b"]",
            b"\"",
            b":",
            b",",
            b"\\u0000",
            b"\\\"",
            b"\\ud800",
            b"null",
            b"true",
            b"1e400",
            b"-0",
            b"\"jsonrpc\":\"2.0\"",
            b"\"id\":1",
            b"\"id\":\"a\"",
            b"\"method\":\"initialize\"",
            b"\"method\":\"ping\"",
            b"\"params\":{\"protocolVersion\":\"2025-06-18\"}",
            b"\"hook_event_name\":\"SessionStart\"",
            b"\"hook_event_name\":",
            b"\"Session\\u0053tart\"",
        ],
        _ => &[
            b"http://",
            b"https://",
            b"HTTPS://",
            b"127.0.0.1",
            b"localhost",
            b"[::1]",
            b"[::ffff:127.0.0.1]",
            b":443",
            b":0",
            b":65536",
            b"/",
            b"?",
            b"#",
            b"@",
            b".",
            b"0x7f",
            b"origin ",
            b"\ned25519 ",
            b"\n",
            b"\r\n",
            b"-",
            b"_",
            b"=",
            b"A",
            b"f",
            b"\xc3\xa9",
        ],
    }
}

fn mutate(rng: &mut Rng, pool: &[Vec<u8>], dictionary: &[&[u8]]) -> Vec<u8> {
    let mut input = pool[rng.below(pool.len())].clone();
    let rounds = 1 << rng.below(4);
    for _ in 0..rounds {
        let len = input.len();
        match rng.below(10) {
            0 if len > 0 => {
                let at = rng.below(len);
                input[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                input[at] = rng.byte();
            }
            2 => {
                let at = rng.below(len + 1);
                let count = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..count).map(|_| rng.byte()).collect();
                input.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let at = rng.below(len);
                let end = (at + 1 + rng.below(16.min(len - at))).min(len);
                input.drain(at..end);
            }
            4 if len > 0 => {
                // Duplicates a span, the way a header or a chunk is repeated.
                let at = rng.below(len);
                let end = (at + 1 + rng.below(64.min(len - at))).min(len);
                let span = input[at..end].to_vec();
                let to = rng.below(input.len() + 1);
                input.splice(to..to, span);
            }
            5 => {
                // Splices in part of another seed.
                let other = &pool[rng.below(pool.len())];
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let end = (from + 1 + rng.below(other.len() - from)).min(other.len());
                    let at = rng.below(len + 1);
                    input.splice(at..at, other[from..end].iter().copied());
                }
            }
            6 | 7 if !dictionary.is_empty() => {
                let token = dictionary[rng.below(dictionary.len())];
                let at = rng.below(len + 1);
                if rng.below(2) == 0 || at + token.len() > len {
                    input.splice(at..at, token.iter().copied());
                } else {
                    input[at..at + token.len()].copy_from_slice(token);
                }
            }
            8 if len > 0 => input.truncate(rng.below(len)),
            _ if len > 0 => {
                // Sets a byte to one the parsers care about.
                const INTERESTING: &[u8] = b"\x00\x01\x7f\x80\xff\r\n \t:;,\"{}[]\\";
                let at = rng.below(len);
                input[at] = INTERESTING[rng.below(INTERESTING.len())];
            }
            _ => input.push(rng.byte()),
        }
    }
    input.truncate(MAX_INPUT_LEN);
    input
}

/// xorshift64*: reproducible from the seed `cargo xtask fuzz` prints.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn byte(&mut self) -> u8 {
        self.next().to_le_bytes()[0]
    }
}
