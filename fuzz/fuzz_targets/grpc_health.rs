//! Fuzzes `weir_proxy::grpc_health_serving`, which reads the answer of an endpoint to an
//! active gRPC health check (`grpc.health.v1.HealthCheckResponse` in one message frame:
//! bytes the endpoint controls) and decides whether it is `SERVING`.
//! Input: the first byte's lowest bit picks the mode.
//! - Raw (bit clear): the rest is the frame. It never panics.
//! - Built (bit set): the rest is read as fields, each a byte `k` then bytes as `k` says:
//!   `k % 4` picks a varint (field 1, the status, or another field number), a
//!   length-delimited field, or a fixed64/fixed32 field; the next byte is the value or
//!   the length. The message is encoded here, framed, and the answer must be `SERVING`
//!   exactly when the last status field read is 1 (protobuf: the last one wins; absent,
//!   UNKNOWN). A compressed flag or a declared length past the end is never `SERVING`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::grpc_health_serving;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn frame(msg: &[u8]) -> Vec<u8> {
    let mut f = vec![0];
    f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    f.extend_from_slice(msg);
    f
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let _ = grpc_health_serving(rest);
        return;
    }
    let mut msg = Vec::new();
    let mut status = 0u64;
    let mut it = rest.iter().copied();
    while let Some(k) = it.next() {
        let field = u64::from(k >> 2).max(2); // another field than the status: 2..=63
        let value = u64::from(it.next().unwrap_or(0));
        match k % 4 {
            0 => {
                // The status; values above 127 take two varint bytes.
                varint(&mut msg, 1 << 3);
                varint(&mut msg, value);
                status = value;
            }
            1 => {
                varint(&mut msg, field << 3);
                varint(&mut msg, value << 20);
            }
            2 => {
                varint(&mut msg, (field << 3) | 2);
                let len = (value % 8) as usize;
                varint(&mut msg, len as u64);
                msg.extend(std::iter::repeat_n(0xff, len));
            }
            _ => {
                if value % 2 == 0 {
                    varint(&mut msg, (field << 3) | 1);
                    msg.extend_from_slice(&[0x08; 8]);
                } else {
                    varint(&mut msg, (field << 3) | 5);
                    msg.extend_from_slice(&[0x08; 4]);
                }
            }
        }
    }
    let f = frame(&msg);
    assert_eq!(grpc_health_serving(&f), status == 1, "{msg:02x?}");
    // Compressed, or cut short: never SERVING.
    let mut compressed = f.clone();
    compressed[0] = 1;
    assert!(!grpc_health_serving(&compressed));
    if !msg.is_empty() {
        assert!(!grpc_health_serving(&f[..f.len() - 1]));
    }
});
