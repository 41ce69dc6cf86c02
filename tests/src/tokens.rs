//! OAUTHBEARER tokens made by the test itself: an ES256 signing key, its JSON Web Key Set in a
//! file (what `sasl_oauthbearer_jwks_endpoint_url` points at), and JWTs it signs.

use std::path::{Path, PathBuf};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use base64::Engine as _;

const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

pub const ISSUER: &str = "https://issuer.strata.test";
pub const AUDIENCE: &str = "strata";

pub struct TokenIssuer {
    key: EcdsaKeyPair,
    kid: String,
    pub jwks: PathBuf,
}

impl TokenIssuer {
    /// A new key, its key set written to `dir/<name>.jwks.json`.
    pub fn new(dir: &Path, name: &str) -> TokenIssuer {
        let key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).expect("key");
        let point = key.public_key().as_ref();
        let jwks = serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "kid": name,
            "x": B64URL.encode(&point[1..33]), "y": B64URL.encode(&point[33..65]),
        }]});
        let path = dir.join(format!("{name}.jwks.json"));
        std::fs::write(&path, jwks.to_string()).expect("write JWKS");
        TokenIssuer {
            key,
            kid: name.to_string(),
            jwks: path,
        }
    }

    /// A JWT for `subject`, expiring `expires_in_s` from now (negative: already expired),
    /// with the test issuer and audience and any `extra` claims.
    pub fn token(&self, subject: &str, expires_in_s: i64, extra: serde_json::Value) -> String {
        let now = crate::now_ms() / 1000;
        let mut claims = serde_json::json!({
            "sub": subject, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + expires_in_s,
        });
        if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": self.kid});
        self.sign(&header, &claims)
    }

    /// A JWT with exactly this header and these claims, signed by this issuer's key.
    pub fn sign(&self, header: &serde_json::Value, claims: &serde_json::Value) -> String {
        let signed = format!(
            "{}.{}",
            B64URL.encode(header.to_string()),
            B64URL.encode(claims.to_string())
        );
        let sig = self
            .key
            .sign(&SystemRandom::new(), signed.as_bytes())
            .expect("sign");
        format!("{signed}.{}", B64URL.encode(sig.as_ref()))
    }
}
