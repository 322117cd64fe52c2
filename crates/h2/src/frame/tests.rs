use bytes::Bytes;

use super::*;

/// The bytes of a frame head with the stream field as given (reserved bit included).
fn head_raw(len: u32, kind: u8, flags: u8, stream_field: u32) -> Vec<u8> {
    let l = len.to_be_bytes();
    let mut out = vec![l[1], l[2], l[3], kind, flags];
    out.extend_from_slice(&stream_field.to_be_bytes());
    out
}

/// Decodes one frame of the given head fields and payload.
fn one(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Result<Frame, Error> {
    let mut bytes = head_raw(payload.len() as u32, kind, flags, stream);
    bytes.extend_from_slice(payload);
    let frames = read_all(&bytes);
    assert_eq!(frames.len(), 1);
    frames.into_iter().next().unwrap().1
}

/// Walks `bytes` as frames (head, then payload), stopping at the first one cut short.
fn read_all(bytes: &[u8]) -> Vec<(Head, Result<Frame, Error>)> {
    let whole = Bytes::copy_from_slice(bytes);
    let mut at = 0;
    let mut frames = Vec::new();
    while let Some(head) = bytes.get(at..at + HEAD_LEN) {
        let head = Head::parse(head.try_into().unwrap());
        let start = at + HEAD_LEN;
        let end = start + head.len as usize;
        if end > bytes.len() {
            break;
        }
        frames.push((head, decode(head, whole.slice(start..end))));
        at = end;
    }
    frames
}

const CONN_PROTOCOL: Error = Error::Connection(Reason::PROTOCOL_ERROR);
const CONN_FRAME_SIZE: Error = Error::Connection(Reason::FRAME_SIZE_ERROR);

fn settings_payload(entries: &[(u16, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, value) in entries {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
    out
}

#[test]
fn head_parse_reads_every_field() {
    let head = Head::parse(&[0x12, 0x34, 0x56, 0x01, 0x25, 0x00, 0x00, 0x01, 0x03]);
    assert_eq!(
        head,
        Head {
            len: 0x12_3456,
            kind: kind::HEADERS,
            flags: 0x25,
            stream: 0x103,
        }
    );
    assert!(head.has(flag::END_STREAM | flag::END_HEADERS));
    assert!(head.has(flag::PRIORITY));
    assert!(!head.has(flag::PADDED));
    assert_eq!(PREFACE.len(), 24);
    assert_eq!(&PREFACE[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
}

#[test]
fn the_reserved_bit_of_stream_ids_is_ignored_on_read() {
    let head = Head::parse(&[0, 0, 4, kind::RST_STREAM, 0, 0x80, 0, 0, 5]);
    assert_eq!(head.stream, 5);
    let head = Head::parse(&[0, 0, 0, kind::SETTINGS, 0, 0x80, 0, 0, 0]);
    assert_eq!(head.stream, 0);
    // A SETTINGS frame whose stream field is only the reserved bit is on stream 0.
    assert!(matches!(
        one(kind::SETTINGS, 0, 0x8000_0000, &[]),
        Ok(Frame::Settings { ack: false, .. })
    ));
    assert_eq!(
        one(kind::DATA, 0, 0x8000_0007, b"x"),
        Ok(Frame::Data {
            stream: 7,
            end_stream: false,
            data: Bytes::from_static(b"x"),
            flow_len: 1,
        })
    );
    // DATA on "stream 0x80000000" is DATA on stream 0.
    assert_eq!(one(kind::DATA, 0, 0x8000_0000, b"x"), Err(CONN_PROTOCOL));
    // The reserved bits of GOAWAY's last stream and WINDOW_UPDATE's increment too.
    assert_eq!(
        one(kind::GOAWAY, 0, 0, &[0x80, 0, 0, 9, 0, 0, 0, 0]),
        Ok(Frame::GoAway {
            last_stream: 9,
            reason: Reason::NO_ERROR,
            debug: Bytes::new(),
        })
    );
    assert_eq!(
        one(kind::WINDOW_UPDATE, 0, 1, &[0x80, 0, 1, 0]),
        Ok(Frame::WindowUpdate {
            stream: 1,
            increment: 256,
        })
    );
    assert_eq!(
        one(kind::WINDOW_UPDATE, 0, 1, &[0x80, 0, 0, 0]),
        Err(Error::Stream(1, Reason::PROTOCOL_ERROR))
    );
    // Written heads never set it.
    let mut out = Vec::new();
    write_rst_stream(&mut out, 0x8000_0003, Reason::CANCEL);
    assert_eq!(out[5..9], [0, 0, 0, 3]);
}

#[test]
fn frames_on_the_wrong_stream_are_connection_protocol_errors() {
    for kind in [
        kind::DATA,
        kind::HEADERS,
        kind::PRIORITY,
        kind::RST_STREAM,
        kind::CONTINUATION,
    ] {
        let payload: &[u8] = match kind {
            kind::PRIORITY => &[0, 0, 0, 1, 16],
            kind::RST_STREAM => &[0, 0, 0, 8],
            _ => b"abc",
        };
        assert_eq!(one(kind, 0, 0, payload), Err(CONN_PROTOCOL), "type {kind}");
    }
    for kind in [kind::SETTINGS, kind::PING, kind::GOAWAY] {
        let payload: &[u8] = match kind {
            kind::SETTINGS => &[],
            _ => &[0; 8],
        };
        assert_eq!(one(kind, 0, 1, payload), Err(CONN_PROTOCOL), "type {kind}");
    }
}

#[test]
fn padded_data_counts_its_padding_for_flow_control() {
    // Pad length 3, "hello", 3 bytes of padding: 9 bytes for flow control.
    let payload = b"\x03hello\0\0\0";
    assert_eq!(
        one(kind::DATA, flag::PADDED | flag::END_STREAM, 1, payload),
        Ok(Frame::Data {
            stream: 1,
            end_stream: true,
            data: Bytes::from_static(b"hello"),
            flow_len: 9,
        })
    );
    // Padding that is the whole rest: empty data, still all counted.
    assert_eq!(
        one(kind::DATA, flag::PADDED, 1, b"\x04abcd"),
        Ok(Frame::Data {
            stream: 1,
            end_stream: false,
            data: Bytes::new(),
            flow_len: 5,
        })
    );
    // Only the pad length (0): empty data, one byte of flow control.
    assert_eq!(
        one(kind::DATA, flag::PADDED, 1, b"\x00"),
        Ok(Frame::Data {
            stream: 1,
            end_stream: false,
            data: Bytes::new(),
            flow_len: 1,
        })
    );
    // Unpadded: the payload is the data.
    assert_eq!(
        one(kind::DATA, 0, 1, b"\x03hello"),
        Ok(Frame::Data {
            stream: 1,
            end_stream: false,
            data: Bytes::from_static(b"\x03hello"),
            flow_len: 6,
        })
    );
}

#[test]
fn padding_longer_than_the_payload_is_a_connection_protocol_error() {
    assert_eq!(
        one(kind::DATA, flag::PADDED, 1, b"\x05abcd"),
        Err(CONN_PROTOCOL)
    );
    assert_eq!(
        one(kind::DATA, flag::PADDED, 1, b"\xff"),
        Err(CONN_PROTOCOL)
    );
    assert_eq!(
        one(kind::HEADERS, flag::PADDED, 1, b"\x03ab"),
        Err(CONN_PROTOCOL)
    );
    // With priority, the padding must fit after the 5 priority bytes.
    assert_eq!(
        one(
            kind::HEADERS,
            flag::PADDED | flag::PRIORITY,
            1,
            b"\x03\0\0\0\0\x0fab"
        ),
        Err(CONN_PROTOCOL)
    );
    // No room for the pad length, or the priority fields: too small a frame.
    assert_eq!(one(kind::DATA, flag::PADDED, 1, b""), Err(CONN_FRAME_SIZE));
    assert_eq!(
        one(kind::HEADERS, flag::PADDED, 1, b""),
        Err(CONN_FRAME_SIZE)
    );
    assert_eq!(
        one(kind::HEADERS, flag::PRIORITY, 1, b"\0\0\0\0"),
        Err(CONN_FRAME_SIZE)
    );
    assert_eq!(
        one(
            kind::HEADERS,
            flag::PADDED | flag::PRIORITY,
            1,
            b"\0\0\0\0\0"
        ),
        Err(CONN_FRAME_SIZE)
    );
}

#[test]
fn padded_headers_with_priority() {
    // Pad length 2, priority (exclusive, on stream 3, weight 16), block, padding.
    let payload = b"\x02\x80\0\0\x03\x0fblock\0\0";
    assert_eq!(
        one(
            kind::HEADERS,
            flag::PADDED | flag::PRIORITY | flag::END_HEADERS | flag::END_STREAM,
            5,
            payload
        ),
        Ok(Frame::Headers {
            stream: 5,
            end_stream: true,
            end_headers: true,
            priority: Some(Priority {
                dependency: 3,
                exclusive: true,
                weight: 15,
            }),
            block: Bytes::from_static(b"block"),
        })
    );
    // Priority without padding, not exclusive, and an empty block.
    assert_eq!(
        one(kind::HEADERS, flag::PRIORITY, 5, b"\0\0\0\x01\xff"),
        Ok(Frame::Headers {
            stream: 5,
            end_stream: false,
            end_headers: false,
            priority: Some(Priority {
                dependency: 1,
                exclusive: false,
                weight: 255,
            }),
            block: Bytes::new(),
        })
    );
    // Padding only.
    assert_eq!(
        one(
            kind::HEADERS,
            flag::PADDED | flag::END_HEADERS,
            5,
            b"\x01ab\0"
        ),
        Ok(Frame::Headers {
            stream: 5,
            end_stream: false,
            end_headers: true,
            priority: None,
            block: Bytes::from_static(b"ab"),
        })
    );
}

#[test]
fn a_stream_depending_on_itself_is_a_stream_protocol_error() {
    assert_eq!(
        one(kind::HEADERS, flag::PRIORITY, 3, b"\0\0\0\x03\x10block"),
        Err(Error::Stream(3, Reason::PROTOCOL_ERROR))
    );
    assert_eq!(
        one(kind::HEADERS, flag::PRIORITY, 3, b"\x80\0\0\x03\x10block"),
        Err(Error::Stream(3, Reason::PROTOCOL_ERROR))
    );
    assert_eq!(
        one(kind::PRIORITY, 0, 3, b"\0\0\0\x03\x10"),
        Err(Error::Stream(3, Reason::PROTOCOL_ERROR))
    );
    // The same fields without the PRIORITY flag are the block.
    assert!(matches!(
        one(kind::HEADERS, 0, 3, b"\0\0\0\x03\x10block"),
        Ok(Frame::Headers { priority: None, block, .. }) if block.len() == 10
    ));
}

#[test]
fn priority_frames() {
    assert_eq!(
        one(kind::PRIORITY, 0, 3, b"\x80\0\0\x01\x07"),
        Ok(Frame::Priority {
            stream: 3,
            priority: Priority {
                dependency: 1,
                exclusive: true,
                weight: 7,
            },
        })
    );
    for len in [0, 4, 6, 9] {
        assert_eq!(
            one(kind::PRIORITY, 0, 3, &vec![0; len]),
            Err(Error::Stream(3, Reason::FRAME_SIZE_ERROR)),
            "length {len}"
        );
    }
}

#[test]
fn rst_stream_of_another_length_is_a_connection_frame_size_error() {
    assert_eq!(
        one(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8]),
        Ok(Frame::RstStream {
            stream: 1,
            reason: Reason::CANCEL,
        })
    );
    for len in [0, 3, 5, 8] {
        assert_eq!(
            one(kind::RST_STREAM, 0, 1, &vec![0; len]),
            Err(CONN_FRAME_SIZE),
            "length {len}"
        );
    }
}

#[test]
fn settings_lengths() {
    for len in [1, 5, 7, 13] {
        assert_eq!(
            one(kind::SETTINGS, 0, 0, &vec![0; len]),
            Err(CONN_FRAME_SIZE),
            "length {len}"
        );
    }
    assert_eq!(
        one(kind::SETTINGS, flag::ACK, 0, &[0; 6]),
        Err(CONN_FRAME_SIZE)
    );
    assert_eq!(
        one(kind::SETTINGS, flag::ACK, 0, &[]),
        Ok(Frame::Settings {
            ack: true,
            settings: Settings::default(),
        })
    );
    assert_eq!(
        one(kind::SETTINGS, 0, 0, &[]),
        Ok(Frame::Settings {
            ack: false,
            settings: Settings::default(),
        })
    );
}

#[test]
fn settings_values_are_checked() {
    let check = |id: u16, value: u32| {
        one(kind::SETTINGS, 0, 0, &settings_payload(&[(id, value)])).map(|frame| match frame {
            Frame::Settings { settings, .. } => settings,
            other => panic!("{other:?}"),
        })
    };
    assert_eq!(check(setting::ENABLE_PUSH, 2), Err(CONN_PROTOCOL));
    assert_eq!(check(setting::ENABLE_PUSH, u32::MAX), Err(CONN_PROTOCOL));
    assert_eq!(check(setting::ENABLE_PUSH, 1).unwrap().enable_push, Some(1));
    assert_eq!(check(setting::ENABLE_PUSH, 0).unwrap().enable_push, Some(0));
    assert_eq!(
        check(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW + 1),
        Err(Error::Connection(Reason::FLOW_CONTROL_ERROR))
    );
    assert_eq!(
        check(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW)
            .unwrap()
            .initial_window_size,
        Some(MAX_WINDOW)
    );
    assert_eq!(
        check(setting::INITIAL_WINDOW_SIZE, 0)
            .unwrap()
            .initial_window_size,
        Some(0)
    );
    for bad in [0, 1, 16_383, 16_777_216, u32::MAX] {
        assert_eq!(
            check(setting::MAX_FRAME_SIZE, bad),
            Err(CONN_PROTOCOL),
            "{bad}"
        );
    }
    for good in [16_384, 65_536, 16_777_215] {
        assert_eq!(
            check(setting::MAX_FRAME_SIZE, good).unwrap().max_frame_size,
            Some(good)
        );
    }
    assert_eq!(
        check(setting::ENABLE_CONNECT_PROTOCOL, 2),
        Err(CONN_PROTOCOL)
    );
    assert_eq!(
        check(setting::ENABLE_CONNECT_PROTOCOL, 1)
            .unwrap()
            .enable_connect_protocol,
        Some(1)
    );
    // No bounds on the others.
    assert_eq!(
        check(setting::HEADER_TABLE_SIZE, u32::MAX)
            .unwrap()
            .header_table_size,
        Some(u32::MAX)
    );
    assert_eq!(
        check(setting::MAX_CONCURRENT_STREAMS, 0)
            .unwrap()
            .max_concurrent_streams,
        Some(0)
    );
    assert_eq!(
        check(setting::MAX_HEADER_LIST_SIZE, u32::MAX)
            .unwrap()
            .max_header_list_size,
        Some(u32::MAX)
    );
    // A bad value anywhere in the frame fails the frame.
    let payload = settings_payload(&[(setting::HEADER_TABLE_SIZE, 0), (setting::ENABLE_PUSH, 7)]);
    assert_eq!(one(kind::SETTINGS, 0, 0, &payload), Err(CONN_PROTOCOL));
}

#[test]
fn unknown_setting_ids_are_ignored_and_the_last_value_wins() {
    let payload = settings_payload(&[
        (0x0, 1),
        (setting::MAX_CONCURRENT_STREAMS, 100),
        (0x7, 5),
        (0x9, u32::MAX),
        (0xffff, u32::MAX),
        (setting::INITIAL_WINDOW_SIZE, 1),
        (setting::INITIAL_WINDOW_SIZE, 1 << 20),
    ]);
    assert_eq!(
        one(kind::SETTINGS, 0, 0, &payload),
        Ok(Frame::Settings {
            ack: false,
            settings: Settings {
                max_concurrent_streams: Some(100),
                initial_window_size: Some(1 << 20),
                ..Settings::default()
            },
        })
    );
}

#[test]
fn ping_goaway_and_window_update_lengths() {
    for len in [0, 7, 9, 16] {
        assert_eq!(
            one(kind::PING, 0, 0, &vec![0; len]),
            Err(CONN_FRAME_SIZE),
            "PING {len}"
        );
        assert_eq!(
            one(kind::WINDOW_UPDATE, 0, 1, &vec![1; len]),
            Err(CONN_FRAME_SIZE),
            "WINDOW_UPDATE {len}"
        );
    }
    assert_eq!(
        one(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 1]),
        Err(CONN_FRAME_SIZE)
    );
    for len in [0, 4, 7] {
        assert_eq!(
            one(kind::GOAWAY, 0, 0, &vec![0; len]),
            Err(CONN_FRAME_SIZE),
            "GOAWAY {len}"
        );
    }
    assert_eq!(
        one(kind::PING, flag::ACK, 0, b"12345678"),
        Ok(Frame::Ping {
            ack: true,
            payload: *b"12345678",
        })
    );
    assert_eq!(
        one(kind::GOAWAY, 0, 0, b"\0\0\0\x07\0\0\0\x0bcalm down"),
        Ok(Frame::GoAway {
            last_stream: 7,
            reason: Reason::ENHANCE_YOUR_CALM,
            debug: Bytes::from_static(b"calm down"),
        })
    );
}

#[test]
fn a_window_increment_of_zero_is_a_protocol_error() {
    assert_eq!(
        one(kind::WINDOW_UPDATE, 0, 9, &[0; 4]),
        Err(Error::Stream(9, Reason::PROTOCOL_ERROR))
    );
    assert_eq!(one(kind::WINDOW_UPDATE, 0, 0, &[0; 4]), Err(CONN_PROTOCOL));
    assert_eq!(
        one(kind::WINDOW_UPDATE, 0, 0, &[0x7f, 0xff, 0xff, 0xff]),
        Ok(Frame::WindowUpdate {
            stream: 0,
            increment: MAX_WINDOW,
        })
    );
}

#[test]
fn unknown_types_and_flags_are_ignored() {
    for kind in [0x0a, 0x10, 0xff] {
        assert_eq!(
            one(kind, 0xff, 3, b"anything at all"),
            Ok(Frame::Unknown { kind, stream: 3 })
        );
        assert_eq!(one(kind, 0, 0, b""), Ok(Frame::Unknown { kind, stream: 0 }));
    }
    // Flags a type does not define change nothing.
    let undefined = !(flag::END_STREAM | flag::PADDED);
    assert_eq!(
        one(kind::DATA, undefined, 1, b"abc"),
        one(kind::DATA, 0, 1, b"abc")
    );
    let undefined = !(flag::END_STREAM | flag::END_HEADERS | flag::PADDED | flag::PRIORITY);
    assert_eq!(
        one(kind::HEADERS, undefined, 1, b"abc"),
        one(kind::HEADERS, 0, 1, b"abc")
    );
    assert_eq!(
        one(kind::CONTINUATION, !flag::END_HEADERS, 1, b"abc"),
        Ok(Frame::Continuation {
            stream: 1,
            end_headers: false,
            block: Bytes::from_static(b"abc"),
        })
    );
    assert_eq!(
        one(kind::SETTINGS, 0xfe, 0, &[]),
        one(kind::SETTINGS, 0, 0, &[])
    );
    assert_eq!(
        one(kind::PING, 0xfe, 0, &[1; 8]),
        one(kind::PING, 0, 0, &[1; 8])
    );
    for kind in [kind::PRIORITY, kind::RST_STREAM, kind::WINDOW_UPDATE] {
        let payload: &[u8] = if kind == kind::PRIORITY {
            &[0, 0, 0, 1, 1]
        } else {
            &[0, 0, 0, 1]
        };
        assert_eq!(one(kind, 0xff, 3, payload), one(kind, 0, 3, payload));
    }
    assert_eq!(
        one(kind::GOAWAY, 0xff, 0, &[0; 8]),
        one(kind::GOAWAY, 0, 0, &[0; 8])
    );
    assert_eq!(
        one(kind::PUSH_PROMISE, 0xff, 2, &[0, 0, 0, 4]),
        Ok(Frame::PushPromise { stream: 2 })
    );
}

#[test]
fn payloads_are_slices_of_the_read_buffer() {
    let mut bytes = head_raw(9, kind::DATA, flag::PADDED, 1);
    bytes.extend_from_slice(b"\x02abcdef\0\0");
    let whole = Bytes::from(bytes);
    let head = Head::parse(whole[..HEAD_LEN].try_into().unwrap());
    let Ok(Frame::Data { data, .. }) = decode(head, whole.slice(HEAD_LEN..)) else {
        panic!("DATA");
    };
    assert_eq!(data, &b"abcdef"[..]);
    assert_eq!(data.as_ptr(), whole[HEAD_LEN + 1..].as_ptr());
}

#[test]
fn every_frame_type_round_trips() {
    let priority = Priority {
        dependency: 1,
        exclusive: true,
        weight: 200,
    };
    let settings = Settings {
        header_table_size: Some(0),
        enable_push: Some(0),
        max_concurrent_streams: Some(250),
        initial_window_size: Some(MAX_WINDOW),
        max_frame_size: Some(MAX_MAX_FRAME_SIZE),
        max_header_list_size: Some(16 << 10),
        enable_connect_protocol: Some(1),
    };
    let mut out = Vec::new();
    write_data_head(&mut out, 1, 5, false);
    out.extend_from_slice(b"hello");
    write_data(&mut out, 1, b"", true);
    write_headers(&mut out, 3, b"\x82\x86", true, DEFAULT_MAX_FRAME_SIZE);
    write_priority(&mut out, 3, priority);
    write_rst_stream(&mut out, 3, Reason::REFUSED_STREAM);
    write_settings(&mut out, &settings);
    write_settings(&mut out, &Settings::default());
    write_settings_ack(&mut out);
    write_head(&mut out, 4, kind::PUSH_PROMISE, flag::END_HEADERS, 1);
    out.extend_from_slice(&[0, 0, 0, 2]);
    write_ping(&mut out, false, *b"pingpong");
    write_ping(&mut out, true, [0xff; 8]);
    write_goaway(&mut out, 7, Reason::NO_ERROR, b"bye");
    write_goaway(&mut out, 0, Reason(0xdead), b"");
    write_window_update(&mut out, 0, MAX_WINDOW);
    write_window_update(&mut out, 5, 1);
    write_head(&mut out, 3, kind::CONTINUATION, flag::END_HEADERS, 3);
    out.extend_from_slice(b"abc");
    write_head(&mut out, 2, 0x42, 0x99, 11);
    out.extend_from_slice(b"??");
    assert_eq!(
        frames_ok(&out),
        [
            Frame::Data {
                stream: 1,
                end_stream: false,
                data: Bytes::from_static(b"hello"),
                flow_len: 5,
            },
            Frame::Data {
                stream: 1,
                end_stream: true,
                data: Bytes::new(),
                flow_len: 0,
            },
            Frame::Headers {
                stream: 3,
                end_stream: true,
                end_headers: true,
                priority: None,
                block: Bytes::from_static(b"\x82\x86"),
            },
            Frame::Priority {
                stream: 3,
                priority,
            },
            Frame::RstStream {
                stream: 3,
                reason: Reason::REFUSED_STREAM,
            },
            Frame::Settings {
                ack: false,
                settings,
            },
            Frame::Settings {
                ack: false,
                settings: Settings::default(),
            },
            Frame::Settings {
                ack: true,
                settings: Settings::default(),
            },
            Frame::PushPromise { stream: 1 },
            Frame::Ping {
                ack: false,
                payload: *b"pingpong",
            },
            Frame::Ping {
                ack: true,
                payload: [0xff; 8],
            },
            Frame::GoAway {
                last_stream: 7,
                reason: Reason::NO_ERROR,
                debug: Bytes::from_static(b"bye"),
            },
            Frame::GoAway {
                last_stream: 0,
                reason: Reason(0xdead),
                debug: Bytes::new(),
            },
            Frame::WindowUpdate {
                stream: 0,
                increment: MAX_WINDOW,
            },
            Frame::WindowUpdate {
                stream: 5,
                increment: 1,
            },
            Frame::Continuation {
                stream: 3,
                end_headers: true,
                block: Bytes::from_static(b"abc"),
            },
            Frame::Unknown {
                kind: 0x42,
                stream: 11,
            },
        ]
    );
}

#[test]
fn encoded_bytes_are_as_rfc_9113_lays_them_out() {
    let mut out = Vec::new();
    write_settings_ack(&mut out);
    assert_eq!(out, [0, 0, 0, 4, 1, 0, 0, 0, 0]);
    out.clear();
    write_window_update(&mut out, 1, 0x0102_0304);
    assert_eq!(out, [0, 0, 4, 8, 0, 0, 0, 0, 1, 1, 2, 3, 4]);
    out.clear();
    write_settings(
        &mut out,
        &Settings {
            max_concurrent_streams: Some(100),
            ..Settings::default()
        },
    );
    assert_eq!(out, [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
    out.clear();
    write_data_head(&mut out, 0x0100_0001, 0x01_0203, true);
    assert_eq!(out, [1, 2, 3, 0, 1, 1, 0, 0, 1]);
    out.clear();
    write_rst_stream(&mut out, 1, Reason::CANCEL);
    assert_eq!(out, [0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 8]);
    out.clear();
    write_priority(
        &mut out,
        5,
        Priority {
            dependency: 3,
            exclusive: true,
            weight: 15,
        },
    );
    assert_eq!(out, [0, 0, 5, 2, 0, 0, 0, 0, 5, 0x80, 0, 0, 3, 15]);
    // Encoders append.
    let mut out = b"before".to_vec();
    write_ping(&mut out, true, [7; 8]);
    assert_eq!(out[..6], *b"before");
    assert_eq!(out[6..15], [0, 0, 8, 6, 1, 0, 0, 0, 0]);
}

#[test]
fn long_goaway_debug_data_is_cut_to_fit_any_peer() {
    let mut out = Vec::new();
    write_goaway(&mut out, 1, Reason::PROTOCOL_ERROR, &[b'x'; 20_000]);
    assert_eq!(out.len(), HEAD_LEN + DEFAULT_MAX_FRAME_SIZE as usize);
    let frames = frames_ok(&out);
    assert!(matches!(
        &frames[..],
        [Frame::GoAway { debug, .. }] if debug.len() == DEFAULT_MAX_FRAME_SIZE as usize - 8
    ));
}

/// The frames `write_headers` writes: a HEADERS frame, then CONTINUATION frames.
fn split_headers(block: &[u8], end_stream: bool, max: u32) -> Vec<Frame> {
    let mut out = Vec::new();
    write_headers(&mut out, 1, block, end_stream, max);
    let frames = read_all(&out);
    let mut total = 0;
    for (head, _) in &frames {
        assert!(head.len <= max.max(1));
        total += HEAD_LEN + head.len as usize;
    }
    assert_eq!(total, out.len(), "nothing but whole frames");
    frames.into_iter().map(|(_, f)| f.unwrap()).collect()
}

#[test]
fn write_headers_splits_into_continuation_frames_at_the_frame_size() {
    let block: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
    let frames = split_headers(&block, true, DEFAULT_MAX_FRAME_SIZE);
    assert_eq!(
        frames,
        [
            Frame::Headers {
                stream: 1,
                end_stream: true,
                end_headers: false,
                priority: None,
                block: Bytes::copy_from_slice(&block[..16_384]),
            },
            Frame::Continuation {
                stream: 1,
                end_headers: false,
                block: Bytes::copy_from_slice(&block[16_384..32_768]),
            },
            Frame::Continuation {
                stream: 1,
                end_headers: true,
                block: Bytes::copy_from_slice(&block[32_768..]),
            },
        ]
    );
    // Exactly the frame size: one frame; one byte more: a one-byte CONTINUATION.
    let frames = split_headers(&block[..16_384], false, DEFAULT_MAX_FRAME_SIZE);
    assert!(matches!(
        &frames[..],
        [Frame::Headers { end_headers: true, end_stream: false, block, .. }] if block.len() == 16_384
    ));
    let frames = split_headers(&block[..16_385], false, DEFAULT_MAX_FRAME_SIZE);
    assert!(matches!(
        &frames[..],
        [
            Frame::Headers { end_headers: false, .. },
            Frame::Continuation { end_headers: true, block, .. },
        ] if block.len() == 1
    ));
    // Small sizes, down to one byte a frame (0 is taken as 1).
    for max in [0, 1, 2, 3, 7] {
        let frames = split_headers(b"abcdefghij", false, max);
        assert_eq!(frames.len(), 10usize.div_ceil(max.max(1) as usize));
        let mut joined = Vec::new();
        for (i, frame) in frames.iter().enumerate() {
            let last = i + 1 == frames.len();
            match frame {
                Frame::Headers {
                    end_headers, block, ..
                } if i == 0 => {
                    assert_eq!(*end_headers, last);
                    joined.extend_from_slice(block);
                }
                Frame::Continuation {
                    end_headers, block, ..
                } if i > 0 => {
                    assert_eq!(*end_headers, last);
                    joined.extend_from_slice(block);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(joined, b"abcdefghij");
    }
}

#[test]
fn write_headers_of_an_empty_block_is_one_empty_headers_frame() {
    for max in [0, 1, DEFAULT_MAX_FRAME_SIZE] {
        assert_eq!(
            split_headers(b"", true, max),
            [Frame::Headers {
                stream: 1,
                end_stream: true,
                end_headers: true,
                priority: None,
                block: Bytes::new(),
            }]
        );
    }
}

#[test]
fn reasons_print_their_names() {
    assert_eq!(format!("{:?}", Reason::NO_ERROR), "NO_ERROR");
    assert_eq!(
        format!("{:?}", Reason::FRAME_SIZE_ERROR),
        "FRAME_SIZE_ERROR"
    );
    assert_eq!(
        format!("{:?}", Reason::HTTP_1_1_REQUIRED),
        "HTTP_1_1_REQUIRED"
    );
    assert_eq!(Reason::HTTP_1_1_REQUIRED, Reason(0xd));
    assert_eq!(Reason::ENHANCE_YOUR_CALM, Reason(0xb));
    assert_eq!(format!("{:?}", Reason(0xe)), "Reason(0xe)");
    assert_eq!(Reason(0xe).name(), None);
    assert_eq!(
        format!("{:?}", Error::Stream(3, Reason::CANCEL)),
        "Stream(3, CANCEL)"
    );
    assert_eq!(
        Error::Connection(Reason::PROTOCOL_ERROR).to_string(),
        "HTTP/2 connection error PROTOCOL_ERROR"
    );
}

// --- The checks of the fuzz target `h2_frames` (fuzz/fuzz_targets/h2_frames.rs), on
// pseudo-random inputs, so `cargo test` runs them without a fuzzer.

include!("fuzz_check.rs");

/// xorshift64*: reproducible pseudo-random numbers without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// Settings entries with identifiers around the known ones and values near the bounds.
fn random_settings(rng: &mut Rng) -> Vec<u8> {
    let mut payload = Vec::new();
    for _ in 0..rng.below(5) {
        let id = rng.below(10) as u16;
        let random = rng.next() as u32;
        let value = rng.pick(&[
            0,
            1,
            2,
            16_383,
            16_384,
            16_777_215,
            16_777_216,
            MAX_WINDOW,
            MAX_WINDOW + 1,
            u32::MAX,
            random,
        ]);
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    payload
}

/// A sequence of frames that are often almost right: half of them of the length and on
/// the kind of stream their type wants, with values near the checks (zero increments,
/// self-dependencies, settings near their bounds, pad lengths that nearly fit); the
/// others anything. Sometimes a length past the end, or the input cut short.
fn random_input(rng: &mut Rng) -> Vec<u8> {
    let mut input = Vec::new();
    for _ in 0..rng.below(6) + 1 {
        let kind = match rng.below(12) {
            10 => rng.pick(&[0x0a, 0x0b, 0x42, 0xff]),
            11 => rng.next() as u8,
            k => k as u8,
        };
        let flags = match rng.below(3) {
            0 => rng.next() as u8,
            1 => rng.pick(&[0, flag::ACK, flag::PADDED, flag::PRIORITY, 0x2c, 0x29, 0x0d]),
            _ => 0,
        };
        let fitting = rng.below(2) == 0;
        let reserved = if rng.below(4) == 0 { 0x8000_0000 } else { 0 };
        let stream = match rng.below(6) {
            _ if fitting && matches!(kind, kind::SETTINGS | kind::PING | kind::GOAWAY) => 0,
            _ if fitting && kind == kind::WINDOW_UPDATE => rng.below(3) as u32,
            _ if fitting => 1 + rng.below(7) as u32,
            0 => 0,
            1 => 1,
            2 | 3 => rng.below(8) as u32,
            _ => rng.next() as u32,
        } | reserved;
        let random = rng.next() as u32;
        let word = rng.pick(&[
            0,
            0x8000_0000,
            1,
            MAX_WINDOW,
            random,
            stream,
            stream ^ reserved ^ 0x8000_0000,
        ]);
        let n = match kind {
            kind::PRIORITY => 5,
            kind::RST_STREAM | kind::WINDOW_UPDATE => 4,
            kind::PING => 8,
            kind::GOAWAY => 8 + rng.below(12) as usize,
            _ => rng.below(40) as usize,
        };
        let mut payload: Vec<u8> = match rng.below(4) {
            _ if fitting && kind == kind::SETTINGS => random_settings(rng),
            _ if fitting => {
                let mut payload: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                // The 31-bit field (priority, error code, increment, last stream), at
                // the offset HEADERS puts it after a pad length.
                let at = usize::from(kind == kind::HEADERS && flags & flag::PADDED != 0);
                if payload.len() >= at + 4 {
                    payload[at..at + 4].copy_from_slice(&word.to_be_bytes());
                }
                payload
            }
            0 => {
                let n = rng.pick(&[0, 1, 4, 5, 6, 8, 12]);
                (0..n).map(|_| rng.next() as u8).collect()
            }
            _ => {
                let n = rng.below(40) as usize;
                (0..n).map(|_| rng.next() as u8).collect()
            }
        };
        // Pad lengths that often fit.
        let pad = rng.below(payload.len() as u64 + 2) as u8;
        if kind != kind::HEADERS
            && let Some(first) = payload.first_mut()
            && rng.below(2) == 0
        {
            *first = pad;
        }
        let mut len = payload.len() as u32;
        if rng.below(20) == 0 {
            // A length past the end: the walk stops there.
            len += 1 + rng.below(1 << 20) as u32;
        }
        input.extend_from_slice(&head_raw(len, kind, flags, stream)[..]);
        input.extend_from_slice(&payload);
    }
    if rng.below(10) == 0 {
        input.truncate(rng.below(input.len() as u64 + 1) as usize);
    }
    input
}

#[test]
fn random_frame_sequences_decode_and_round_trip() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut decoded = 0;
    for _ in 0..20_000 {
        let input = random_input(&mut rng);
        check_frames(&input);
        decoded += read_all(&input).iter().filter(|(_, f)| f.is_ok()).count();
    }
    // The generator reaches past the checks often enough to test the round trips.
    assert!(decoded > 20_000, "{decoded} frames decoded");
}

#[test]
fn the_fuzz_seeds_hold() {
    for seed in seeds() {
        check_frames(&seed.1);
    }
}

/// The seed inputs in `fuzz/corpus/h2_frames/` (kept equal by `fuzz_seeds_are_in_the_corpus`).
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    // A client's opening after the preface: SETTINGS, WINDOW_UPDATE, HEADERS of a GET
    // (HPACK: :method GET, :scheme https, :path /, :authority in literal), DATA, and the
    // SETTINGS ACK.
    let mut opening = Vec::new();
    write_settings(
        &mut opening,
        &Settings {
            header_table_size: Some(65_536),
            enable_push: Some(0),
            max_concurrent_streams: Some(100),
            initial_window_size: Some(6_291_456),
            max_header_list_size: Some(262_144),
            ..Settings::default()
        },
    );
    write_window_update(&mut opening, 0, 15_663_105);
    write_headers(
        &mut opening,
        1,
        b"\x82\x87\x84\x41\x0bexample.com",
        false,
        DEFAULT_MAX_FRAME_SIZE,
    );
    write_data(&mut opening, 1, b"{\"hello\":1}", true);
    write_settings_ack(&mut opening);

    // Padded DATA and HEADERS with priority, then a split block.
    let mut padded = head_raw(10, kind::DATA, flag::PADDED | flag::END_STREAM, 3);
    padded.extend_from_slice(b"\x04hello\0\0\0\0");
    padded.extend_from_slice(&head_raw(
        10,
        kind::HEADERS,
        flag::PADDED | flag::PRIORITY | flag::END_HEADERS,
        5,
    ));
    padded.extend_from_slice(b"\x02\x80\0\0\x03\x0f\x82\x84\0\0");
    write_headers(&mut padded, 7, b"\x82\x87\x84\x41\x0bexample.com", true, 4);

    // Control frames: PING, PRIORITY, RST_STREAM, GOAWAY with debug data, an unknown type.
    let mut control = Vec::new();
    write_ping(&mut control, false, *b"12345678");
    write_priority(
        &mut control,
        9,
        Priority {
            dependency: 0,
            exclusive: false,
            weight: 15,
        },
    );
    write_rst_stream(&mut control, 1, Reason::CANCEL);
    write_head(&mut control, 3, 0x42, 0xff, 1);
    control.extend_from_slice(b"???");
    write_goaway(&mut control, 7, Reason::NO_ERROR, b"shutting down");

    // Errors: padding too long, SETTINGS with a bad frame size, a self-dependency, a zero
    // window increment, and a frame cut short.
    let mut errors = head_raw(3, kind::DATA, flag::PADDED, 1);
    errors.extend_from_slice(b"\x05ab");
    errors.extend_from_slice(&head_raw(6, kind::SETTINGS, 0, 0));
    errors.extend_from_slice(&settings_payload(&[(setting::MAX_FRAME_SIZE, 100)]));
    errors.extend_from_slice(&head_raw(5, kind::PRIORITY, 0, 3));
    errors.extend_from_slice(b"\0\0\0\x03\x10");
    errors.extend_from_slice(&head_raw(4, kind::WINDOW_UPDATE, 0, 3));
    errors.extend_from_slice(&[0x80, 0, 0, 0]);
    errors.extend_from_slice(&head_raw(100, kind::DATA, 0, 1));
    errors.extend_from_slice(b"short");

    vec![
        ("client_opening", opening),
        ("padded", padded),
        ("control", control),
        ("errors", errors),
    ]
}

#[test]
fn fuzz_seeds_are_in_the_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/h2_frames");
    for (name, bytes) in seeds() {
        let path = dir.join(name);
        if std::env::var_os("WEIR_WRITE_H2_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let stored = std::fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (WEIR_WRITE_H2_SEEDS=1 writes it)", path.display())
        });
        assert_eq!(stored, bytes, "{}", path.display());
    }
}
