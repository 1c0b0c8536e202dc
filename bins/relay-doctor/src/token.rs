//! `relay-doctor token ensure` (§4.1).

use anyhow::Context as _;
use relay_identity::{EnsureError, ProcessEnv, StatePaths, ensure_token_file, store};

/// Creates the token file if needed and prints `created <path>` or `existing <path>` (or the
/// JSON equivalent). The token itself is never printed.
pub(crate) fn ensure(json: bool) -> anyhow::Result<()> {
    let euid = store::current_euid();
    if euid == 0 {
        // Checked before anything else so that root never even creates a directory.
        return Err(EnsureError::Root.into());
    }
    let paths = StatePaths::resolve(&ProcessEnv).context("locating the state directory")?;
    let path = paths.token_file();
    let outcome = ensure_token_file(&paths, euid)?;
    let text = if json {
        let report = serde_json::json!({
            "outcome": outcome.as_str(),
            "path": path.display().to_string(),
        });
        format!("{report}\n")
    } else {
        format!("{} {}\n", outcome.as_str(), path.display())
    };
    crate::print_report(&text)
}
