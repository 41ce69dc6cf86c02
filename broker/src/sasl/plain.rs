//! SASL PLAIN (RFC 4616): `authzid NUL authcid NUL password`, one message, client to server.
//! Only over TLS does it keep the password from the network; the security chapter says so.

use super::SaslError;

/// Longest PLAIN message accepted (a 255-byte name and password each, with room to spare).
const MAX_MESSAGE: usize = 2048;

/// The user and password of a client's PLAIN message.
pub fn parse(msg: &[u8]) -> Result<(String, String), SaslError> {
    if msg.len() > MAX_MESSAGE {
        return Err(SaslError::Malformed("PLAIN message too long"));
    }
    let mut parts = msg.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslError::Malformed(
            "PLAIN message is not authzid\\0user\\0password",
        ));
    };
    let utf8 = |b: &[u8]| {
        String::from_utf8(b.to_vec()).map_err(|_| SaslError::Malformed("PLAIN is not UTF-8"))
    };
    let (authzid, user, password) = (utf8(authzid)?, utf8(user)?, utf8(password)?);
    if user.is_empty() || password.is_empty() {
        return Err(SaslError::Malformed("PLAIN user or password is empty"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(SaslError::Failed("authorization id differs from the user"));
    }
    Ok((user, password))
}

/// A client's PLAIN message.
pub fn message(user: &str, password: &str) -> Vec<u8> {
    format!("\0{user}\0{password}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_messages_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse(&message("alice", "pw")).unwrap(),
            ("alice".to_string(), "pw".to_string())
        );
        assert!(parse(b"alice\0alice\0pw").is_ok());
        for bad in [
            &b""[..],
            b"alice",
            b"\0alice",
            b"\0\0pw",
            b"\0alice\0",
            b"bob\0alice\0pw",
            b"\0alice\0pw\0extra",
            b"\0\xff\0pw",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(parse(&vec![b'a'; MAX_MESSAGE + 1]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_messages_parse_or_are_refused(
            msg in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100),
        ) {
            if let Ok((user, password)) = parse(&msg) {
                proptest::prop_assert!(!user.is_empty() && !password.is_empty());
            }
        }
    }
}
