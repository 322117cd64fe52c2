// The checks of the `h2_frames` fuzz target, `include!`d both by
// fuzz/fuzz_targets/h2_frames.rs and by the unit tests (which run them over pseudo-random
// inputs), so the two cannot drift apart. Only the public API is used; the includer brings
// `Bytes`, `Error`, `Frame`, `HEAD_LEN`, `Head`, `decode`, `flag`, `kind`, the encoders and
// the frame-size constants into scope.

/// Every frame of `bytes`, which must all decode (whole frames only).
fn frames_ok(bytes: &[u8]) -> Vec<Frame> {
    let whole = Bytes::copy_from_slice(bytes);
    let mut at = 0;
    let mut frames = Vec::new();
    while at < bytes.len() {
        let head = Head::parse(bytes[at..at + HEAD_LEN].try_into().unwrap());
        let start = at + HEAD_LEN;
        let end = start + head.len as usize;
        frames.push(decode(head, whole.slice(start..end)).expect("a written frame decodes"));
        at = end;
    }
    frames
}

/// Writes a decoded frame back with the encoders; returns the frames that must decode
/// from what was written.
fn write_back(frame: &Frame, out: &mut Vec<u8>) -> Vec<Frame> {
    match frame {
        Frame::Data {
            stream,
            end_stream,
            data,
            ..
        } => {
            write_data(out, *stream, data, *end_stream);
            // Unpadded: flow control counts the data alone.
            vec![Frame::Data {
                stream: *stream,
                end_stream: *end_stream,
                data: data.clone(),
                flow_len: data.len() as u32,
            }]
        }
        Frame::Headers {
            stream,
            end_stream,
            priority,
            block,
            ..
        } => {
            write_headers(out, *stream, block, *end_stream, MAX_MAX_FRAME_SIZE);
            let mut frames = vec![Frame::Headers {
                stream: *stream,
                end_stream: *end_stream,
                end_headers: true,
                priority: None,
                block: block.clone(),
            }];
            if let Some(priority) = priority {
                write_priority(out, *stream, *priority);
                frames.push(Frame::Priority {
                    stream: *stream,
                    priority: *priority,
                });
            }
            frames
        }
        Frame::Priority { stream, priority } => {
            write_priority(out, *stream, *priority);
            vec![frame.clone()]
        }
        Frame::RstStream { stream, reason } => {
            write_rst_stream(out, *stream, *reason);
            vec![frame.clone()]
        }
        Frame::Settings { ack: true, .. } => {
            write_settings_ack(out);
            vec![frame.clone()]
        }
        Frame::Settings {
            ack: false,
            settings,
        } => {
            write_settings(out, settings);
            vec![frame.clone()]
        }
        Frame::PushPromise { stream } => {
            write_head(out, 4, kind::PUSH_PROMISE, flag::END_HEADERS, *stream);
            out.extend_from_slice(&2u32.to_be_bytes());
            vec![frame.clone()]
        }
        Frame::Ping { ack, payload } => {
            write_ping(out, *ack, *payload);
            vec![frame.clone()]
        }
        Frame::GoAway {
            last_stream,
            reason,
            debug,
        } => {
            write_goaway(out, *last_stream, *reason, debug);
            // The encoder keeps what fits a frame of the smallest allowed size.
            let kept = debug.len().min(DEFAULT_MAX_FRAME_SIZE as usize - 8);
            vec![Frame::GoAway {
                last_stream: *last_stream,
                reason: *reason,
                debug: debug.slice(..kept),
            }]
        }
        Frame::WindowUpdate { stream, increment } => {
            write_window_update(out, *stream, *increment);
            vec![frame.clone()]
        }
        Frame::Continuation {
            stream,
            end_headers,
            block,
        } => {
            let flags = if *end_headers { flag::END_HEADERS } else { 0 };
            write_head(out, block.len() as u32, kind::CONTINUATION, flags, *stream);
            out.extend_from_slice(block);
            vec![frame.clone()]
        }
        Frame::Unknown { kind, stream } => {
            write_head(out, 0, *kind, 0, *stream);
            vec![frame.clone()]
        }
    }
}

/// `write_headers` at a frame size of `max`: HEADERS, then CONTINUATION frames, joining
/// back to `block`.
fn check_split(stream: u32, end_stream: bool, block: &[u8], max: u32) {
    let mut out = Vec::new();
    write_headers(&mut out, stream, block, end_stream, max);
    let frames = frames_ok(&out);
    assert_eq!(frames.len(), block.len().div_ceil(max as usize).max(1));
    let mut joined = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        let last = i + 1 == frames.len();
        match frame {
            Frame::Headers {
                stream: s,
                end_stream: es,
                end_headers,
                priority: None,
                block,
            } if i == 0 && *s == stream && *es == end_stream => {
                assert_eq!(*end_headers, last);
                joined.extend_from_slice(block);
            }
            Frame::Continuation {
                stream: s,
                end_headers,
                block,
            } if i > 0 && *s == stream => {
                assert_eq!(*end_headers, last);
                joined.extend_from_slice(block);
            }
            other => panic!("{other:?} at {i}"),
        }
    }
    assert_eq!(joined, block);
}

/// The fuzz target's checks on one input.
fn check_frames(input: &[u8]) {
    let whole = Bytes::copy_from_slice(input);
    let mut at = 0;
    while let Some(head) = input.get(at..at + HEAD_LEN) {
        let head = Head::parse(head.try_into().unwrap());
        assert!(head.len < 1 << 24 && head.stream < 1 << 31);
        let start = at + HEAD_LEN;
        let end = start + head.len as usize;
        if end > input.len() {
            break;
        }
        at = end;
        let frame = match decode(head, whole.slice(start..end)) {
            Ok(frame) => frame,
            Err(Error::Stream(stream, _)) => {
                assert!(stream != 0 && stream == head.stream, "{head:?}");
                continue;
            }
            Err(Error::Connection(_)) => continue,
        };
        match &frame {
            Frame::Data { data, flow_len, .. } => {
                assert!(data.len() <= *flow_len as usize && *flow_len == head.len);
            }
            Frame::Headers { block, .. } | Frame::Continuation { block, .. } => {
                assert!(block.len() <= head.len as usize);
            }
            _ => {}
        }
        let mut out = Vec::new();
        let expected = write_back(&frame, &mut out);
        assert_eq!(frames_ok(&out), expected, "{frame:?} written back");
        if let Frame::Headers {
            stream,
            end_stream,
            block,
            ..
        } = &frame
        {
            check_split(*stream, *end_stream, block, u32::from(head.flags % 16) + 1);
        }
    }
}
