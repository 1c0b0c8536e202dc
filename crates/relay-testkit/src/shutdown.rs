//! How the testkit's server processes (`relay-stand-in`, `relay-bare-proxy`) know to stop.

use std::io::Read;

use anyhow::Context;

/// Resolves on SIGTERM or SIGINT (ctrl-c elsewhere), or when standard input ends if `watch_stdin`.
pub async fn shutdown_signal(watch_stdin: bool) -> anyhow::Result<()> {
    let stdin_ended = if watch_stdin {
        Some(stdin_eof()?)
    } else {
        None
    };
    let stdin_closed = async {
        match stdin_ended {
            Some(ended) => {
                let _ = ended.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            () = stdin_closed => {}
        }
    }
    #[cfg(not(unix))]
    {
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.context("listening for ctrl-c")?,
            () = stdin_closed => {}
        }
    }
    Ok(())
}

/// Resolves when standard input reaches its end (or fails).
///
/// A plain thread reads it: a blocking read in tokio's pool would keep the runtime, and so the process, alive after a signal.
fn stdin_eof() -> anyhow::Result<tokio::sync::oneshot::Receiver<()>> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("stdin-watch".to_owned())
        .spawn(move || {
            let mut sink = [0_u8; 256];
            let mut stdin = std::io::stdin().lock();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = tx.send(());
        })
        .context("spawning the stdin watcher")?;
    Ok(rx)
}
