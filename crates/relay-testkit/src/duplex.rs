//! Providers that answer before they have read the request body, as a full-duplex server
//! may: raw TCP, one connection, so the test controls exactly when each side reads.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads until the end of a request head; returns what it read and where the head ends.
async fn read_head(read: &mut (impl AsyncRead + Unpin)) -> io::Result<(Vec<u8>, usize)> {
    let mut buf = Vec::new();
    loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok((buf, at + 4));
        }
        let mut chunk = [0u8; 8192];
        let n = read.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::other(
                "the connection closed before a request head",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Accepts one connection and, as soon as it has a request head, answers `200` with the
/// body `ok`, then neither reads nor closes: the connection is handed back, for the test
/// to see what the other side does.
pub async fn answer_then_stop_reading(listener: TcpListener) -> io::Result<TcpStream> {
    let (mut stream, _) = listener.accept().await?;
    read_head(&mut stream).await?;
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        .await?;
    Ok(stream)
}

/// Accepts one connection and, as soon as it has a request head, writes `answer` and closes
/// the connection, the request body unread.
pub async fn answer_then_close(listener: TcpListener, answer: &[u8]) -> io::Result<()> {
    let (mut stream, _) = listener.accept().await?;
    read_head(&mut stream).await?;
    stream.write_all(answer).await?;
    stream.shutdown().await
}

/// Accepts one connection and, as soon as it has a request head, answers `200` with
/// `answer_len` bytes while it reads the request body (its `Content-Length`) to the end.
/// Returns how many body bytes it read.
///
/// The answer's last byte waits until the body has been read: a relay may close the
/// connection once the answer is over (the rest of an upload is then not needed), so an
/// answer that could end first would make what the provider reads a race.
pub async fn answer_while_reading(listener: TcpListener, answer_len: usize) -> io::Result<usize> {
    let (stream, _) = listener.accept().await?;
    let (mut read, mut write) = stream.into_split();
    let (buf, head_len) = read_head(&mut read).await?;
    let head = String::from_utf8_lossy(&buf[..head_len]).to_ascii_lowercase();
    let expected: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| io::Error::other("the request has no Content-Length"))?;
    let (read_whole, last_byte) = tokio::sync::oneshot::channel::<()>();
    let answering = tokio::spawn(async move {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {answer_len}\r\n\r\n");
        write.write_all(head.as_bytes()).await?;
        let answer = vec![b'y'; answer_len];
        let (most, last) = answer.split_at(answer_len.saturating_sub(1));
        write.write_all(most).await?;
        // Sent also when the body ended short, so that the test sees the count, not a hang.
        let _ = last_byte.await;
        write.write_all(last).await?;
        Ok::<_, io::Error>(write)
    });
    let mut got = buf.len() - head_len;
    let mut chunk = vec![0u8; 64 * 1024];
    while got < expected {
        let n = read.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        got += n;
    }
    drop(read_whole);
    // Held until the answer is written, so the connection stays open for it.
    let _write = answering.await.map_err(io::Error::other)??;
    Ok(got)
}
