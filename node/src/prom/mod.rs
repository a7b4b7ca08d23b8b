//! Prometheus remote write and remote read (`POST /api/v1/write`, `POST /api/v1/read`).
//!
//! Both speak snappy-compressed protobuf, with messages generated from Prometheus' own
//! `remote.proto` and `types.proto` (`proto/prometheus`). They are translations, not paths of
//! their own: a remote write becomes line protocol written through the front door
//! ([`write::to_line_protocol`]), and a remote read becomes SQL run through it as the caller
//! ([`read::Reader`]), so access control, routing to shards and deletes apply unchanged.
//!
//! The mapping:
//!
//! - Each metric name (`__name__`) is a table; every other label is a tag; the sample value is
//!   the float field `value`; the timestamp (milliseconds) is `time`.
//! - A staleness marker (the NaN Prometheus writes when a series disappears) is a row whose
//!   `value` is NULL and whose boolean field `stale` is true; remote read returns it as the
//!   same marker, so PromQL ends the series there as it would in Prometheus' own storage.
//! - Other NaN and infinite values are not stored (line protocol, and so EbbDB's columns, hold
//!   finite floats): they are counted in `ebb_prometheus_samples_skipped_total`.
//! - Out-of-order samples are accepted at any age, as are samples of any series; a sample at a
//!   time a series already has replaces it (Prometheus would refuse a different value there).
//! - Labels named `time`, `value` or `stale` would collide with those columns, and line
//!   protocol cannot carry a line break: such series are not written, and the request is
//!   answered `400` naming them once the rest is written (Prometheus does not resend a `400`).

pub mod read;
pub mod write;

/// The generated protobuf messages.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/prometheus.rs"));
}

/// The bits of the NaN Prometheus writes as a staleness marker (`value.StaleNaN`).
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// True if `v` is Prometheus' staleness marker (compared by bits: it is one NaN of many).
pub fn is_stale_marker(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// Why a remote write or read request could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The body is not a snappy block.
    #[error("the body is not snappy-compressed protobuf: {0}")]
    Snappy(String),
    /// Decompressed, the body would exceed the limit.
    #[error("the body is {size} bytes decompressed, more than the limit of {limit}")]
    TooLarge {
        /// Its decompressed size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The protobuf message is malformed.
    #[error("the body is not a valid {what}: {reason}")]
    Protobuf {
        /// The message expected.
        what: &'static str,
        /// What the decoder said.
        reason: String,
    },
}

/// Decodes a snappy block (the remote protocol's framing, not the streaming format) of at most
/// `limit` bytes decompressed into message `M`. The size is read from the block's header
/// before anything is allocated.
pub fn decode<M: prost::Message + Default>(
    body: &[u8],
    limit: usize,
    what: &'static str,
) -> Result<M, DecodeError> {
    let size = snap::raw::decompress_len(body).map_err(|e| DecodeError::Snappy(e.to_string()))?;
    if size > limit {
        return Err(DecodeError::TooLarge { size, limit });
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| DecodeError::Snappy(e.to_string()))?;
    M::decode(raw.as_slice()).map_err(|e| DecodeError::Protobuf { what, reason: e.to_string() })
}

/// Encodes `m` as a snappy block (which fails only for messages over 4 GiB).
pub fn encode<M: prost::Message>(m: &M) -> Result<Vec<u8>, snap::Error> {
    snap::raw::Encoder::new().compress_vec(&m.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::proto::{Label, Sample, TimeSeries, WriteRequest};
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label { name: "__name__".into(), value: "up".into() }],
                samples: vec![Sample { value: 1.0, timestamp: 5 }],
            }],
            metadata: vec![],
        };
        let body = encode(&req).unwrap();
        assert_eq!(decode::<WriteRequest>(&body, 1 << 20, "WriteRequest"), Ok(req.clone()));
        assert!(matches!(
            decode::<WriteRequest>(&body, 4, "WriteRequest"),
            Err(DecodeError::TooLarge { limit: 4, .. })
        ));
        assert!(matches!(
            decode::<WriteRequest>(b"not snappy at all", 1 << 20, "WriteRequest"),
            Err(DecodeError::Snappy(_) | DecodeError::Protobuf { .. })
        ));
        // A snappy block claiming 4 GiB is refused from its header, before any allocation.
        let huge = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(decode::<WriteRequest>(&huge, 1 << 20, "WriteRequest").is_err());
        assert!(is_stale_marker(f64::from_bits(STALE_NAN_BITS)));
        assert!(!is_stale_marker(f64::NAN));
    }

    proptest::proptest! {
        /// Any bytes: an error or a message, never a panic or an allocation past the limit.
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode::<WriteRequest>(&body, 1 << 16, "WriteRequest");
            let _ = decode::<super::proto::ReadRequest>(&body, 1 << 16, "ReadRequest");
            let mut framed = snap::raw::Encoder::new().compress_vec(&body).unwrap_or_default();
            framed.truncate(framed.len().saturating_sub(1));
            let _ = decode::<WriteRequest>(&framed, 1 << 16, "WriteRequest");
        }
    }
}
