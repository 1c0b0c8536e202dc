//! Control frames (SPEC §5.6): [`relay_proto::decode`].

use relay_proto::{FrameError, MAX_FRAME_BYTES, decode, encode_versioned};

/// Decodes `data` as one control frame. A frame that decodes must encode again, within the
/// frame limit, to bytes that decode to the same frame; an error must be one that names the
/// input's own shape (a too-large error only for too many bytes, and so on).
pub fn frame_decode(data: &[u8]) {
    match decode(data) {
        Ok(frame) => {
            assert!(data.len() <= MAX_FRAME_BYTES);
            let bytes = match encode_versioned(frame.version, &frame.message) {
                Ok(bytes) => bytes,
                Err(error) => panic!("a decoded frame does not encode again: {error}"),
            };
            assert!(
                bytes.len() <= data.len(),
                "re-encoding grew the frame from {} to {} bytes",
                data.len(),
                bytes.len()
            );
            match decode(&bytes) {
                Ok(again) => assert_eq!(again, frame, "decode(encode(m)) != m"),
                Err(error) => panic!("the re-encoded frame does not decode: {error}"),
            }
        }
        Err(FrameError::TooLarge { len }) => {
            assert_eq!(len, data.len());
            assert!(len > MAX_FRAME_BYTES);
        }
        Err(FrameError::TruncatedHeader { len }) => {
            assert_eq!(len, data.len());
            assert!(len < relay_proto::HEADER_LEN);
        }
        Err(_) => {}
    }
}
