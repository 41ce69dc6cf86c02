//! The consumer protocol's assignment, decoded with `kafka-protocol`'s type.

use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::{Decodable, Message as _};

/// A decoded ConsumerProtocolAssignment (versions 0-3 share this layout).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Assignment {
    version: i16,
    pub(crate) partitions: Vec<(String, Vec<i32>)>,
    user_data: Option<Vec<u8>>,
}

impl std::fmt::Display for Assignment {
    /// `t1:0,1 t2:3`, or `-` for none.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .partitions
            .iter()
            .map(|(t, ps)| {
                let ids: Vec<String> = ps.iter().map(i32::to_string).collect();
                format!("{t}:{}", ids.join(","))
            })
            .collect();
        if parts.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// Decodes a member's ConsumerProtocolAssignment with the codec's own type: the version, then
/// the body at that version (versions after 3 keep its layout in front, and what follows is
/// ignored). An encoder that leaves the trailing user data out entirely (older clients) is
/// read as null user data.
pub(crate) fn decode_assignment(bytes: &[u8]) -> Result<Assignment, String> {
    let (head, body) = bytes
        .split_first_chunk::<2>()
        .ok_or_else(|| format!("truncated version ({} bytes)", bytes.len()))?;
    let version = i16::from_be_bytes(*head);
    if version < 0 {
        return Err(format!("invalid version {version}"));
    }
    let at = version.min(ConsumerProtocolAssignment::VERSIONS.max);
    let decoded = match ConsumerProtocolAssignment::decode(&mut &body[..], at) {
        Ok(a) => a,
        Err(e) => {
            // Without the user data's length, the body decodes with a null one appended; a
            // body cut anywhere else does not decode, or reads the appended bytes as data.
            let mut padded = body.to_vec();
            padded.extend_from_slice(&(-1i32).to_be_bytes());
            match ConsumerProtocolAssignment::decode(&mut &padded[..], at) {
                Ok(a) if a.user_data.is_none() => a,
                _ => return Err(e.to_string()),
            }
        }
    };
    Ok(Assignment {
        version,
        partitions: decoded
            .assigned_partitions
            .into_iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions))
            .collect(),
        user_data: decoded.user_data.map(|b| b.to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(version: i16, topics: &[(&str, &[i32])], user_data: Option<&[u8]>) -> Vec<u8> {
        let mut b = version.to_be_bytes().to_vec();
        b.extend((topics.len() as i32).to_be_bytes());
        for (t, ps) in topics {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
            b.extend((ps.len() as i32).to_be_bytes());
            for p in *ps {
                b.extend(p.to_be_bytes());
            }
        }
        match user_data {
            Some(u) => {
                b.extend((u.len() as i32).to_be_bytes());
                b.extend(u);
            }
            None => b.extend((-1i32).to_be_bytes()),
        }
        b
    }

    #[test]
    fn decodes_valid_assignments() {
        for version in 0..=3 {
            let bytes = encode(version, &[("orders", &[0, 2]), ("t", &[1])], Some(b"ud"));
            let a = decode_assignment(&bytes).unwrap();
            assert_eq!(a.version, version);
            assert_eq!(
                a.partitions,
                vec![
                    ("orders".to_string(), vec![0, 2]),
                    ("t".to_string(), vec![1])
                ]
            );
            assert_eq!(a.user_data.as_deref(), Some(&b"ud"[..]));
            assert_eq!(a.to_string(), "orders:0,2 t:1");
        }
        // Null user data, and user data left out entirely.
        let bytes = encode(1, &[("x", &[])], None);
        assert_eq!(decode_assignment(&bytes).unwrap().user_data, None);
        let without = &bytes[..bytes.len() - 4];
        let a = decode_assignment(without).unwrap();
        assert_eq!(a.partitions, vec![("x".to_string(), vec![])]);
        assert_eq!(a.user_data, None);
        // Empty assignment.
        let a = decode_assignment(&encode(0, &[], None)).unwrap();
        assert!(a.partitions.is_empty());
        assert_eq!(a.to_string(), "-");
    }

    #[test]
    fn rejects_every_truncation() {
        let bytes = encode(0, &[("orders", &[0, 2])], Some(b"userdata"));
        // Cutting anywhere except exactly before the user data must fail.
        let user_data_at = bytes.len() - 4 - 8;
        for cut in 0..bytes.len() {
            let r = decode_assignment(&bytes[..cut]);
            if cut == user_data_at {
                assert!(r.is_ok(), "cut at {cut}");
            } else {
                assert!(r.is_err(), "cut at {cut} decoded as {r:?}");
            }
        }
    }

    #[test]
    fn rejects_garbage_without_panicking_or_huge_allocations() {
        // Enormous counts.
        assert!(decode_assignment(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err());
        let mut b = encode(0, &[("t", &[])], None);
        b.truncate(2 + 4 + 2 + 1);
        b.extend(i32::MAX.to_be_bytes());
        assert!(decode_assignment(&b).is_err());
        // Negative counts and lengths, negative version, bad UTF-8.
        assert!(decode_assignment(&[0, 0, 0xff, 0xff, 0xff, 0xfe]).is_err());
        assert!(decode_assignment(&[0, 0, 0, 0, 0, 1, 0xff, 0xff]).is_err());
        assert!(decode_assignment(&[0xff, 0xff, 0, 0, 0, 0]).is_err());
        assert!(decode_assignment(&[0, 0, 0, 0, 0, 1, 0, 1, 0xc3, 0, 0, 0, 0]).is_err());
        assert!(decode_assignment(&[]).is_err());
        // Deterministic pseudo-random bytes: never a panic.
        let mut x: u32 = 0x1234_5678;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = decode_assignment(&bytes);
        }
    }
}
