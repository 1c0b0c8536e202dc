//! Real compressed inputs made here with the encoders of the same crates, bombs included.

use std::io::Write as _;

use proptest::prelude::*;

use super::*;

const TEXT: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\"}\n\n";

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn brotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
        let _ = w.write_all(data);
    }
    out
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(data, 3).unwrap_or_default()
}

/// `n` zero bytes compressed by `encode`, fed in pieces so the test never holds them whole.
fn bomb(n: usize, coding: ContentEncoding) -> Vec<u8> {
    let zeros = vec![0u8; 1 << 16];
    let pieces = n / zeros.len();
    match coding {
        ContentEncoding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            for _ in 0..pieces {
                let _ = e.write_all(&zeros);
            }
            e.finish().unwrap_or_default()
        }
        ContentEncoding::Deflate => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            for _ in 0..pieces {
                let _ = e.write_all(&zeros);
            }
            e.finish().unwrap_or_default()
        }
        ContentEncoding::Brotli => {
            let mut out = Vec::new();
            {
                let mut w = brotli::CompressorWriter::new(&mut out, 1 << 16, 1, 22);
                for _ in 0..pieces {
                    let _ = w.write_all(&zeros);
                }
            }
            out
        }
        ContentEncoding::Zstd => {
            let Ok(mut e) = zstd::stream::write::Encoder::new(Vec::new(), 1) else {
                return Vec::new();
            };
            for _ in 0..pieces {
                let _ = e.write_all(&zeros);
            }
            e.finish().unwrap_or_default()
        }
        ContentEncoding::Identity => vec![0; n],
    }
}

fn ok(header: Option<&str>, body: &[u8], limit: usize) -> (Vec<u8>, bool) {
    match decode(header, body, limit) {
        Ok(d) => (d.body.into_owned(), d.truncated),
        Err(e) => panic!("decode failed: {e}"),
    }
}

#[test]
fn every_coding_round_trips() {
    for (header, body) in [
        ("gzip", gzip(TEXT)),
        ("x-gzip", gzip(TEXT)),
        ("deflate", zlib(TEXT)),
        ("deflate", raw_deflate(TEXT)),
        ("br", brotli(TEXT)),
        ("zstd", zstd(TEXT)),
        (" GZip ", gzip(TEXT)),
        ("identity", TEXT.to_vec()),
    ] {
        assert_eq!(
            ok(Some(header), &body, 1 << 20),
            (TEXT.to_vec(), false),
            "{header}"
        );
    }
}

#[test]
fn identity_is_borrowed_and_bounded() {
    for header in [None, Some(""), Some("identity")] {
        let decoded = decode(header, TEXT, 1 << 20).ok();
        assert!(
            matches!(decoded, Some(Decoded { body: Cow::Borrowed(b), truncated: false, ended_early: false }) if b == TEXT),
            "{header:?}"
        );
    }
    let cut = decode(None, TEXT, 5).ok();
    assert!(matches!(
        cut,
        Some(Decoded {
            body: Cow::Borrowed(b"event"),
            truncated: true,
            ended_early: false,
        })
    ));
}

#[test]
fn stacked_codings_are_undone_last_first() {
    // `gzip, br`: gzip applied first, then br.
    let body = brotli(&gzip(TEXT));
    assert_eq!(ok(Some("gzip, br"), &body, 1 << 20), (TEXT.to_vec(), false));
    let body = zstd(&zlib(TEXT));
    assert_eq!(
        ok(Some("deflate,identity, zstd"), &body, 1 << 20),
        (TEXT.to_vec(), false)
    );
    assert_eq!(
        decode(Some("gzip, gzip, gzip, gzip, gzip"), TEXT, 10),
        Err(DecodeError::TooManyEncodings { count: 5 })
    );
}

#[test]
fn an_unknown_coding_is_a_typed_error_before_any_work() {
    for header in ["compress", "gzip, snappy", "aes128gcm"] {
        let Err(DecodeError::UnsupportedEncoding { encoding }) = decode(Some(header), TEXT, 10)
        else {
            panic!("{header} was accepted");
        };
        assert!(header.contains(&encoding), "{header} → {encoding}");
    }
    assert_eq!(
        DecodeError::UNSUPPORTED_ENCODING_TYPE,
        "relay_unsupported_encoding"
    );
}

#[test]
fn a_bomb_stops_at_the_bound_and_says_truncated() {
    // 16 MiB of zeros, a few kilobytes compressed, decoded within a 1 MiB bound.
    let limit = 1 << 20;
    for coding in [
        ContentEncoding::Gzip,
        ContentEncoding::Deflate,
        ContentEncoding::Brotli,
        ContentEncoding::Zstd,
    ] {
        let body = bomb(16 << 20, coding);
        assert!(
            body.len() < 256 << 10,
            "{coding:?} bomb is {} bytes",
            body.len()
        );
        let (out, truncated) = ok(Some(coding.name()), &body, limit);
        assert_eq!((out.len(), truncated), (limit, true), "{coding:?}");
        assert!(out.iter().all(|b| *b == 0));
    }
}

#[test]
fn a_nested_bomb_is_bounded_at_every_step() {
    // gzip inside gzip: the inner layer is itself a bomb.
    let inner = bomb(16 << 20, ContentEncoding::Gzip);
    let body = gzip(&inner);
    let (out, truncated) = ok(Some("gzip, gzip"), &body, 1 << 20);
    assert_eq!((out.len(), truncated), (1 << 20, true));
}

#[test]
fn exactly_the_bound_is_not_truncated() {
    let (out, truncated) = ok(Some("gzip"), &gzip(TEXT), TEXT.len());
    assert_eq!((out.len(), truncated), (TEXT.len(), false));
    let (out, truncated) = ok(Some("gzip"), &gzip(TEXT), TEXT.len() - 1);
    assert_eq!((out.len(), truncated), (TEXT.len() - 1, true));
}

#[test]
fn a_body_cut_early_yields_its_decoded_prefix() {
    let long: Vec<u8> = TEXT.iter().copied().cycle().take(200_000).collect();
    for (header, body) in [
        ("gzip", gzip(&long)),
        ("deflate", zlib(&long)),
        ("br", brotli(&long)),
        ("zstd", zstd(&long)),
    ] {
        let cut = &body[..body.len() / 2];
        match decode(Some(header), cut, 1 << 20) {
            Ok(d) => {
                assert!(d.truncated && d.ended_early, "{header}");
                assert!(long.starts_with(&d.body), "{header}: not a prefix");
            }
            Err(e) => panic!("{header}: {e}"),
        }
    }
}

#[test]
fn a_bomb_cut_at_the_bound_did_not_end_early() {
    let body = bomb(1 << 20, ContentEncoding::Gzip);
    match decode(Some("gzip"), &body, 1024) {
        Ok(d) => assert!(d.truncated && !d.ended_early),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn stacked_codings_cut_at_the_bound_did_not_end_early() {
    // The inner step's input was cut at the bound by the outer one: too large, not short.
    let body = brotli(&bomb(1 << 20, ContentEncoding::Gzip));
    match decode(Some("gzip, br"), &body, 1024) {
        Ok(d) => assert!(d.truncated && !d.ended_early),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn an_empty_or_short_gzip_body_ended_early() {
    for body in [&b""[..], b"not gzip"] {
        match decode(Some("gzip"), body, 1024) {
            Ok(d) => assert!(d.ended_early, "{body:?}"),
            Err(DecodeError::Corrupt { .. }) => {}
            Err(e) => panic!("{body:?}: {e}"),
        }
    }
}

#[test]
fn corrupt_bodies_are_errors() {
    for header in ["gzip", "br", "zstd"] {
        let result = decode(
            Some(header),
            b"this is not compressed at all, not even a bit",
            1024,
        );
        assert!(
            matches!(result, Err(DecodeError::Corrupt { .. })),
            "{header}: {result:?}"
        );
    }
}

#[test]
fn a_zstd_frame_asking_for_a_huge_window_is_refused() {
    // A window of 2^27 bytes, declared in the frame header (no content size to shrink it).
    let mut encoder = match zstd::stream::write::Encoder::new(Vec::new(), 3) {
        Ok(e) => e,
        Err(e) => panic!("{e}"),
    };
    let _ = encoder.include_contentsize(false);
    let _ = encoder.window_log(27);
    let _ = encoder.long_distance_matching(true);
    let _ = encoder.write_all(&vec![7u8; 1 << 20]);
    let body = encoder.finish().unwrap_or_default();
    let result = decode(Some("zstd"), &body, 1 << 20);
    assert!(
        matches!(
            result,
            Err(DecodeError::Corrupt {
                encoding: "zstd",
                ..
            })
        ),
        "{result:?}"
    );
    // The same data with an ordinary window decodes.
    let (out, truncated) = ok(Some("zstd"), &zstd(&vec![7u8; 1 << 20]), 1 << 20);
    assert_eq!((out.len(), truncated), (1 << 20, false));
}

proptest! {
    /// No input makes a decoder panic or produce more than the bound.
    #[test]
    fn any_bytes_decode_or_fail_within_the_bound(
        body in proptest::collection::vec(any::<u8>(), 0..512),
        which in 0usize..5,
        limit in 0usize..4096,
    ) {
        let header = ["gzip", "deflate", "br", "zstd", "identity"][which];
        if let Ok(d) = decode(Some(header), &body, limit) {
            prop_assert!(d.body.len() <= limit);
        }
    }

    #[test]
    fn any_text_round_trips_through_every_coding(
        text in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        for (header, body) in [
            ("gzip", gzip(&text)),
            ("deflate", zlib(&text)),
            ("br", brotli(&text)),
            ("zstd", zstd(&text)),
        ] {
            let d = decode(Some(header), &body, 1 << 20);
            prop_assert_eq!(d.map(|d| (d.body.into_owned(), d.truncated)), Ok((text.clone(), false)));
        }
    }
}
