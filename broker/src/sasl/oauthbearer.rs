//! SASL OAUTHBEARER (RFC 7628, KIP-255) with JWT bearer tokens (RFC 7519) signed by a key of a
//! JSON Web Key Set (RFC 7517): the client's message, and the token's validation as Kafka's
//! `OAuthBearerValidatorCallbackHandler` does it (signature, expiry, not-before, issuer,
//! audience, a subject claim).
//!
//! Invariants:
//! - only signed tokens pass: `alg` must be one this module verifies (RS256/384/512,
//!   ES256/384) and match the key's type; `none` and HMAC algorithms are refused;
//! - a token is checked against the keys given, never against a key named inside it;
//! - the message and the token are bounded ([`MAX_MESSAGE`]) and parsed from what arrived; a
//!   malformed one is a failure, never a panic.

use aws_lc_rs::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use base64::Engine as _;
use serde_json::Value;

use super::SaslError;

const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Longest client message accepted (a JWT with generous claims fits in a few KiB).
pub const MAX_MESSAGE: usize = 16 * 1024;

/// The bearer token of a client's initial response: `n,[a=authzid],\x01auth=Bearer T\x01...\x01`.
pub fn token(msg: &[u8]) -> Result<&str, SaslError> {
    if msg.len() > MAX_MESSAGE {
        return Err(SaslError::Malformed("OAUTHBEARER message too long"));
    }
    let msg = std::str::from_utf8(msg).map_err(|_| SaslError::Malformed("not UTF-8"))?;
    let mut parts = msg.splitn(3, ',');
    let (Some("n" | "y"), Some(_authzid), Some(rest)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslError::Malformed(
            "OAUTHBEARER message has no gs2 header",
        ));
    };
    let auth = rest
        .split('\u{1}')
        .find_map(|kv| kv.strip_prefix("auth="))
        .ok_or(SaslError::Malformed("OAUTHBEARER message has no auth="))?;
    let token = auth
        .strip_prefix("Bearer ")
        .ok_or(SaslError::Malformed(
            "OAUTHBEARER auth is not a Bearer token",
        ))?
        .trim();
    if token.is_empty() {
        return Err(SaslError::Malformed("empty bearer token"));
    }
    Ok(token)
}

/// A client's initial response carrying `token`.
pub fn message(token: &str) -> Vec<u8> {
    format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
}

/// One verification key of a JWKS.
#[derive(Debug, Clone)]
pub struct Key {
    kid: Option<String>,
    key: KeyMaterial,
}

#[derive(Debug, Clone)]
enum KeyMaterial {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (0x04 ‖ x ‖ y) on P-256 or P-384.
    Ec {
        p384: bool,
        point: Vec<u8>,
    },
}

/// The keys of a JSON Web Key Set document; keys of other types, or meant for encryption,
/// are skipped.
pub fn parse_jwks(doc: &[u8]) -> Result<Vec<Key>, String> {
    let doc: Value = serde_json::from_slice(doc).map_err(|e| format!("not JSON: {e}"))?;
    let keys = doc["keys"].as_array().ok_or("no \"keys\" array")?;
    let bytes = |v: &Value| v.as_str().and_then(|s| B64URL.decode(s).ok());
    let mut out = Vec::new();
    for k in keys {
        if k["use"].as_str().is_some_and(|u| u != "sig") {
            continue;
        }
        let key = match (k["kty"].as_str(), k["crv"].as_str()) {
            (Some("RSA"), _) => match (bytes(&k["n"]), bytes(&k["e"])) {
                (Some(n), Some(e)) => KeyMaterial::Rsa { n, e },
                _ => return Err("an RSA key without n and e".into()),
            },
            (Some("EC"), Some(crv @ ("P-256" | "P-384"))) => match (bytes(&k["x"]), bytes(&k["y"]))
            {
                (Some(x), Some(y)) => {
                    let mut point = vec![4];
                    point.extend(x);
                    point.extend(y);
                    KeyMaterial::Ec {
                        p384: crv == "P-384",
                        point,
                    }
                }
                _ => return Err("an EC key without x and y".into()),
            },
            _ => continue,
        };
        out.push(Key {
            kid: k["kid"].as_str().map(str::to_string),
            key,
        });
    }
    if out.is_empty() {
        return Err("no RSA or EC signing key".into());
    }
    Ok(out)
}

/// What a token must satisfy besides its signature.
#[derive(Debug, Clone)]
pub struct Expectations {
    pub issuer: Option<String>,
    /// The token's `aud` must name one of these (when any is given).
    pub audience: Vec<String>,
    /// The claim naming the principal (Kafka's `sasl.oauthbearer.sub.claim.name`).
    pub subject_claim: String,
    pub clock_skew_s: i64,
}

/// A valid token's principal name and expiry (seconds since the epoch).
#[derive(Debug, PartialEq, Eq)]
pub struct Validated {
    pub subject: String,
    pub expires_s: i64,
}

/// Validates `token` against `keys` and `expect` at `now_s` (seconds since the epoch).
pub fn validate(
    token: &str,
    keys: &[Key],
    expect: &Expectations,
    now_s: i64,
) -> Result<Validated, SaslError> {
    let invalid = SaslError::Failed("invalid token");
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslError::Malformed("a JWT has three parts"));
    };
    let json = |part: &str| -> Result<Value, SaslError> {
        let raw = B64URL
            .decode(part)
            .map_err(|_| SaslError::Malformed("JWT part is not base64url"))?;
        serde_json::from_slice(&raw).map_err(|_| SaslError::Malformed("JWT part is not JSON"))
    };
    let (header, claims) = (json(h)?, json(p)?);
    let signature = B64URL
        .decode(s)
        .map_err(|_| SaslError::Malformed("JWT signature is not base64url"))?;
    let alg = header["alg"].as_str().unwrap_or("");
    let kid = header["kid"].as_str();
    let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
    let verified = keys
        .iter()
        .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
        .any(|k| verify(alg, &k.key, signed, &signature));
    if !verified {
        return Err(SaslError::Failed(
            "token signature does not verify with any known key",
        ));
    }
    let time = |name: &str| {
        claims[name]
            .as_i64()
            .or_else(|| claims[name].as_f64().map(|f| f as i64))
    };
    let expires_s = time("exp").ok_or(SaslError::Failed("token has no exp"))?;
    if now_s > expires_s + expect.clock_skew_s {
        return Err(SaslError::Failed("token expired"));
    }
    if time("nbf").is_some_and(|nbf| now_s + expect.clock_skew_s < nbf) {
        return Err(SaslError::Failed("token not valid yet"));
    }
    if let Some(iss) = &expect.issuer {
        if claims["iss"].as_str() != Some(iss.as_str()) {
            return Err(SaslError::Failed("token issuer is not the expected one"));
        }
    }
    if !expect.audience.is_empty() {
        let names = match &claims["aud"] {
            Value::String(a) => vec![a.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !names.iter().any(|a| expect.audience.iter().any(|e| e == a)) {
            return Err(SaslError::Failed("token audience is not an expected one"));
        }
    }
    let subject = claims[expect.subject_claim.as_str()]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or(invalid)?;
    Ok(Validated {
        subject: subject.to_string(),
        expires_s,
    })
}

fn verify(alg: &str, key: &KeyMaterial, signed: &[u8], signature: &[u8]) -> bool {
    match (alg, key) {
        ("RS256" | "RS384" | "RS512", KeyMaterial::Rsa { n, e }) => {
            let params = match alg {
                "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                _ => &signature::RSA_PKCS1_2048_8192_SHA512,
            };
            RsaPublicKeyComponents { n, e }
                .verify(params, signed, signature)
                .is_ok()
        }
        ("ES256", KeyMaterial::Ec { p384: false, point }) => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(signed, signature)
                .is_ok()
        }
        ("ES384", KeyMaterial::Ec { p384: true, point }) => {
            UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                .verify(signed, signature)
                .is_ok()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair};

    fn signer() -> (EcdsaKeyPair, String) {
        let key = EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        let point = key.public_key().as_ref();
        let jwks = serde_json::json!({"keys": [
            {"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "EC", "crv": "P-256", "kid": "k1",
             "x": B64URL.encode(&point[1..33]), "y": B64URL.encode(&point[33..65])},
        ]});
        (key, jwks.to_string())
    }

    fn jwt(key: &EcdsaKeyPair, header: Value, claims: Value) -> String {
        let signed = format!(
            "{}.{}",
            B64URL.encode(header.to_string()),
            B64URL.encode(claims.to_string())
        );
        let sig = key.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", B64URL.encode(sig.as_ref()))
    }

    fn expect() -> Expectations {
        Expectations {
            issuer: Some("https://issuer.test".into()),
            audience: vec!["strata".into()],
            subject_claim: "sub".into(),
            clock_skew_s: 30,
        }
    }

    #[test]
    fn a_signed_token_names_its_subject_and_every_other_token_is_refused() {
        let (key, jwks) = signer();
        let keys = parse_jwks(jwks.as_bytes()).unwrap();
        assert_eq!(keys.len(), 1, "the encryption key is skipped");
        let now = 1_800_000_000;
        let header = serde_json::json!({"alg": "ES256", "kid": "k1", "typ": "JWT"});
        let claims = serde_json::json!({"sub": "alice", "iss": "https://issuer.test",
            "aud": ["other", "strata"], "exp": now + 600, "nbf": now - 5});
        let good = jwt(&key, header.clone(), claims.clone());
        let msg = message(&good);
        assert_eq!(token(&msg).unwrap(), good);
        assert_eq!(
            validate(&good, &keys, &expect(), now).unwrap(),
            Validated {
                subject: "alice".into(),
                expires_s: now + 600
            }
        );

        let with = |f: &dyn Fn(&mut Value)| {
            let mut c = claims.clone();
            f(&mut c);
            jwt(&key, header.clone(), c)
        };
        let bad = [
            with(&|c| c["exp"] = (now - 31).into()),
            with(&|c| c["nbf"] = (now + 31).into()),
            with(&|c| c["iss"] = "https://evil.test".into()),
            with(&|c| c["aud"] = "other".into()),
            with(&|c| c["sub"] = "".into()),
            with(&|c| {
                c.as_object_mut().unwrap().remove("exp");
            }),
            jwt(
                &key,
                serde_json::json!({"alg": "ES256", "kid": "k2"}),
                claims.clone(),
            ),
            jwt(
                &key,
                serde_json::json!({"alg": "RS256", "kid": "k1"}),
                claims.clone(),
            ),
            jwt(&key, serde_json::json!({"alg": "HS256"}), claims.clone()),
            // alg none: no signature at all.
            format!(
                "{}.{}.",
                B64URL.encode(r#"{"alg":"none"}"#),
                B64URL.encode(claims.to_string())
            ),
            // A valid signature over other claims.
            {
                let other = with(&|c| c["sub"] = "mallory".into());
                let sig = good.rsplit('.').next().unwrap().to_string();
                format!("{}.{sig}", &other[..other.rfind('.').unwrap()])
            },
            "a.b".into(),
            "!!.!!.!!".into(),
        ];
        for t in bad {
            assert!(validate(&t, &keys, &expect(), now).is_err(), "{t}");
        }
        let open = Expectations {
            issuer: None,
            audience: vec![],
            subject_claim: "azp".into(),
            clock_skew_s: 0,
        };
        let t = with(&|c| c["azp"] = "service-1".into());
        assert_eq!(
            validate(&t, &keys, &open, now).unwrap().subject,
            "service-1"
        );
    }

    #[test]
    fn malformed_messages_and_key_sets_are_refused() {
        for bad in [
            &b""[..],
            b"n,,",
            b"n,,\x01auth=Basic x\x01\x01",
            b"p,,\x01auth=Bearer x\x01",
            b"n,,\x01auth=Bearer \x01",
        ] {
            assert!(token(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(token(&vec![b'n'; MAX_MESSAGE + 1]).is_err());
        for bad in [
            &b"{}"[..],
            b"[]",
            b"{\"keys\":[]}",
            b"{\"keys\":[{\"kty\":\"RSA\"}]}",
            b"nope",
        ] {
            assert!(
                parse_jwks(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
