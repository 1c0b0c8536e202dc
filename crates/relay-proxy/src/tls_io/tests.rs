use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::worker::WorkerIdentity;

/// A transport that serves `data` and counts how often it was read.
struct Counted {
    data: Vec<u8>,
    at: usize,
    reads: usize,
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.reads += 1;
        let n = out.remaining().min(this.data.len() - this.at);
        out.put_slice(&this.data[this.at..this.at + n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn small_reads_cost_one_transport_read_per_64_kib_from_one_buffer() {
    let data = pattern(2 * 1024 * 1024);
    let mut reader = ReadAhead::new(Counted {
        data: data.clone(),
        at: 0,
        reads: 0,
    });
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = reader.read(&mut chunk).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(got, data);
    // 32 full buffers and the read that found the end.
    assert_eq!(reader.inner.reads, 33);
    assert_eq!(reader.buffered(), 0);
    assert!(
        reader.buf.capacity() <= READ_AHEAD_BYTES,
        "the buffer is reused, not grown: {}",
        reader.buf.capacity()
    );
}

#[tokio::test]
async fn a_large_read_goes_straight_to_the_transport() {
    let data = pattern(200 * 1024);
    let mut reader = ReadAhead::new(Counted {
        data: data.clone(),
        at: 0,
        reads: 0,
    });
    let mut got = vec![0u8; 200 * 1024];
    reader.read_exact(&mut got).await.unwrap();
    assert_eq!(got, data);
    assert_eq!(reader.inner.reads, 1);
    assert_eq!(reader.buf.capacity(), 0);
}

type Client = Gather<tokio_rustls::client::TlsStream<ReadAhead<DuplexStream>>>;
type Server = tokio_rustls::server::TlsStream<ReadAhead<DuplexStream>>;

/// A pinned TLS pair over an in-memory pipe that can hold `capacity` bytes.
async fn tls_pair(capacity: usize) -> (Client, Server) {
    let identity = WorkerIdentity::generate("127.0.0.1").unwrap();
    let config = crate::tls::pinned_client_config(identity.certificate_sha256()).unwrap();
    let (client_io, server_io) = tokio::io::duplex(capacity);
    let acceptor = tokio_rustls::TlsAcceptor::from(identity.server_config());
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name =
        rustls::pki_types::ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into());
    let (client, server) = tokio::join!(
        connector.connect(name, ReadAhead::new(client_io)),
        acceptor.accept(ReadAhead::new(server_io)),
    );
    (Gather::new(client.unwrap()), server.unwrap())
}

#[tokio::test]
async fn one_read_gathers_every_record_already_received() {
    let (mut client, mut server) = tls_pair(1024 * 1024).await;
    let data = pattern(256 * 1024);
    server.write_all(&data).await.unwrap();
    server.flush().await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let first = client.read(&mut buf).await.unwrap();
    // One record is 16 KiB; everything the 64 KiB read-ahead took in is returned at once.
    assert!(
        first > 16 * 1024,
        "the first read returned only {first} bytes"
    );
    let mut got = buf[..first].to_vec();
    while got.len() < data.len() {
        let n = client.read(&mut buf).await.unwrap();
        assert_ne!(n, 0, "the stream ended early");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, data);
}

#[tokio::test]
async fn a_corrupt_record_after_good_ones_is_an_error_never_a_clean_end() {
    let (mut client, mut server) = tls_pair(1024 * 1024).await;
    let data = pattern(40 * 1024);
    server.write_all(&data).await.unwrap();
    server.flush().await.unwrap();
    // An application-data record whose contents cannot be decrypted.
    let mut forged = vec![0x17, 0x03, 0x03, 0x01, 0x00];
    forged.extend_from_slice(&[0xAA; 256]);
    server.get_mut().0.inner.write_all(&forged).await.unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let error = loop {
        match client.read(&mut buf).await {
            Ok(0) => panic!("a corrupt record ended the stream cleanly"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(error) => break error,
        }
    };
    // rustls drops what it decrypted in the same pass as the bad record; what did arrive
    // is the stream's start, unchanged.
    assert!(got.len() <= data.len() && got == data[..got.len()]);
    assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
}
