//! `relay-fuzz`: fuzz targets for every parser that takes untrusted bytes, and the small mutation
//! engine that drives them (`cargo xtask fuzz`).
//!
//! Each target is a function `fn(&[u8])` that hands the bytes to the real parser and checks what
//! must hold of its answer; it panics when something does not. [`TARGETS`] lists them by name.
//! The seed corpora in `corpus/<target>/` run as an ordinary test (`tests/corpus.rs`), so every
//! workspace test run replays them.
//!
//! It is a test-support crate: no product binary depends on it. It reaches crate-private parsers
//! only through public API, the daemon's `hook_event` through `relay_proxy::front::fuzz_hook_event`,
//! and compiles the two parsers that live only in binaries (relay-mcp's JSON-RPC core and
//! relay-hook's payload reader) from those binaries' own source files.

pub mod engine;
mod frame;
mod hook;
mod http1;
mod identity;
mod mcp;

// The binaries' own source files, compiled here unchanged: a binary crate cannot be depended
// on, and these files use nothing of their crate but themselves. rustfmt formats them with
// their binaries (and could not resolve their `#[cfg(test)] mod tests;` from here).
#[allow(dead_code)]
#[rustfmt::skip]
#[path = "../../../bins/relay-mcp/src/jsonrpc.rs"]
mod relay_mcp_jsonrpc;
#[allow(dead_code)]
#[rustfmt::skip]
#[path = "../../../bins/relay-hook/src/payload.rs"]
mod relay_hook_payload;

pub use frame::frame_decode;
pub use hook::{hook_event, hook_payload};
pub use http1::http1_watcher;
pub use identity::{fingerprint, origin, pin, token};
pub use mcp::mcp_line;

/// A fuzz target: panics when the parser panics or breaks a property.
pub type Target = fn(&[u8]);

/// Every target by name, in the order `cargo xtask fuzz` runs them.
pub const TARGETS: &[(&str, Target)] = &[
    ("frame_decode", frame_decode),
    ("http1_watcher", http1_watcher),
    ("token", token),
    ("origin", origin),
    ("pin", pin),
    ("fingerprint", fingerprint),
    ("mcp_line", mcp_line),
    ("hook_event", hook_event),
    ("hook_payload", hook_payload),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS
        .iter()
        .find(|(target, _)| *target == name)
        .map(|(_, f)| *f)
}

/// Bytes as text for the string parsers: the valid UTF-8 prefix, so mutated bytes still reach
/// the parser instead of being thrown away.
fn text(data: &[u8]) -> &str {
    match std::str::from_utf8(data) {
        Ok(text) => text,
        Err(error) => std::str::from_utf8(&data[..error.valid_up_to()]).unwrap_or_default(),
    }
}
