//! The principal of a client certificate (mTLS): its subject as an RFC 2253 distinguished
//! name, as Java's `X500Principal.getName()` writes it and Kafka names principals
//! (`CN=alice,OU=eng,O=Example`), then Kafka's `ssl.principal.mapping.rules`.
//!
//! Invariants:
//! - the subject is read from DER the TLS handshake already verified; a name this module
//!   cannot read gives no principal (the connection is refused), never a guessed one;
//! - a rule matches the whole name (Java's `Matcher.matches`), and the first rule that
//!   matches decides; `DEFAULT` is the name unchanged.

use regex::Regex;

/// Kafka's `ssl.principal.mapping.rules`.
#[derive(Debug, Clone)]
pub struct MappingRules(Vec<Rule>);

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Map {
        pattern: Regex,
        replacement: String,
        case: Option<Case>,
    },
}

#[derive(Debug, Clone, Copy)]
enum Case {
    Lower,
    Upper,
}

impl MappingRules {
    /// Parses `RULE:pattern/replacement/[LU]` and `DEFAULT` entries separated by commas (a `/`
    /// inside a pattern or replacement is written `\/`).
    pub fn parse(spec: &str) -> Result<MappingRules, String> {
        let mut rules = Vec::new();
        let mut rest = spec.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after)
                    .ok_or_else(|| format!("rule '{rest}': no '/' after the pattern"))?;
                let (replacement, after) = until_slash(after)
                    .ok_or_else(|| format!("rule '{rest}': no '/' after the replacement"))?;
                let (case, after) = match after.chars().next() {
                    Some('L') => (Some(Case::Lower), &after[1..]),
                    Some('U') => (Some(Case::Upper), &after[1..]),
                    _ => (None, after),
                };
                let pattern = Regex::new(&format!("^(?:{pattern})$"))
                    .map_err(|e| format!("rule pattern '{pattern}': {e}"))?;
                rules.push(Rule::Map {
                    pattern,
                    replacement,
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "'{rest}': expected RULE:pattern/replacement/ or DEFAULT"
                ));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("'{rest}': rules are separated by commas")),
            }
        }
        if rules.is_empty() {
            return Err("no rule".into());
        }
        Ok(MappingRules(rules))
    }

    /// The principal name of distinguished name `dn`: the first matching rule's result, or
    /// `None` when no rule matches.
    pub fn apply(&self, dn: &str) -> Option<String> {
        self.0.iter().find_map(|rule| match rule {
            Rule::Default => Some(dn.to_string()),
            Rule::Map {
                pattern,
                replacement,
                case,
            } => {
                let caps = pattern.captures(dn)?;
                let mut out = String::new();
                caps.expand(replacement, &mut out);
                Some(match case {
                    Some(Case::Lower) => out.to_lowercase(),
                    Some(Case::Upper) => out.to_uppercase(),
                    None => out,
                })
            }
        })
    }
}

/// Text up to the first unescaped `/` (with `\/` unescaped), and what follows the `/`.
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if s[i + 1..].starts_with('/') => {
                out.push('/');
                chars.next();
            }
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// One DER element: its tag, its contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |l, b| (l << 8) | *b as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The RFC 2253 string of a certificate subject: `subject` is the contents of the Name's
/// SEQUENCE (what `webpki::Cert::subject` gives). RDNs are written last first, as RFC 2253
/// and Java do.
pub fn distinguished_name(subject: &[u8]) -> Option<String> {
    let mut rdns = Vec::new();
    let mut rest = subject;
    while !rest.is_empty() {
        let (tag, set, after) = element(rest)?;
        if tag != 0x31 {
            return None;
        }
        let mut attrs = Vec::new();
        let mut inner = set;
        while !inner.is_empty() {
            let (tag, seq, after) = element(inner)?;
            if tag != 0x30 {
                return None;
            }
            let (oid_tag, oid, value) = element(seq)?;
            let (value_tag, value, _) = element(value)?;
            if oid_tag != 0x06 {
                return None;
            }
            attrs.push(format!(
                "{}={}",
                attribute_name(oid)?,
                attribute_value(value_tag, value)
            ));
            inner = after;
        }
        rdns.push(attrs.join("+"));
        rest = after;
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// The short name of a well-known attribute type, else its dotted OID.
fn attribute_name(oid: &[u8]) -> Option<String> {
    const NAMES: &[(&[u8], &str)] = &[
        (&[0x55, 0x04, 0x03], "CN"),
        (&[0x55, 0x04, 0x06], "C"),
        (&[0x55, 0x04, 0x07], "L"),
        (&[0x55, 0x04, 0x08], "ST"),
        (&[0x55, 0x04, 0x09], "STREET"),
        (&[0x55, 0x04, 0x0a], "O"),
        (&[0x55, 0x04, 0x0b], "OU"),
        (
            &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
            "DC",
        ),
        (
            &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
            "UID",
        ),
    ];
    if let Some((_, name)) = NAMES.iter().find(|(o, _)| *o == oid) {
        return Some(name.to_string());
    }
    // Dotted form: the first byte holds two arcs, the rest are base-128 numbers.
    let (&first, rest) = oid.split_first()?;
    let mut arcs = vec![
        u64::from(first / 40).min(2),
        u64::from(first) - 40 * u64::from(first / 40).min(2),
    ];
    let mut n: u64 = 0;
    for &b in rest {
        n = n.checked_mul(128)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            arcs.push(n);
            n = 0;
        }
    }
    Some(
        arcs.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// A value as RFC 2253 writes it: text types escaped, anything else `#` and hex.
fn attribute_value(tag: u8, value: &[u8]) -> String {
    // UTF8String, PrintableString, T61String (read as Latin-1 by most), IA5String.
    let text = match tag {
        0x0c | 0x13 | 0x16 => std::str::from_utf8(value).ok().map(str::to_string),
        0x14 => Some(value.iter().map(|&b| b as char).collect()),
        _ => None,
    };
    let Some(text) = text else {
        return format!(
            "#{}",
            value.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
    };
    let last = text.chars().count().saturating_sub(1);
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of a Name's contents from (OID bytes, UTF8String value) RDNs, in encoding order.
    fn name(rdns: &[&[(&[u8], &str)]]) -> Vec<u8> {
        let tlv = |tag: u8, body: &[u8]| {
            let mut v = vec![tag, body.len() as u8];
            v.extend_from_slice(body);
            v
        };
        let mut out = Vec::new();
        for rdn in rdns {
            let mut set = Vec::new();
            for (oid, value) in *rdn {
                let mut seq = tlv(0x06, oid);
                seq.extend(tlv(0x0c, value.as_bytes()));
                set.extend(tlv(0x30, &seq));
            }
            out.extend(tlv(0x31, &set));
        }
        out
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    const OU: &[u8] = &[0x55, 0x04, 0x0b];

    #[test]
    fn subjects_read_as_java_writes_them() {
        let der = name(&[&[(O, "Example, Inc")], &[(OU, "eng")], &[(CN, "alice")]]);
        assert_eq!(
            distinguished_name(&der).unwrap(),
            "CN=alice,OU=eng,O=Example\\, Inc"
        );
        let der = name(&[&[(CN, " x+y "), (&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d], "v")]]);
        assert_eq!(
            distinguished_name(&der).unwrap(),
            "CN=\\ x\\+y\\ +1.2.840.113549=v"
        );
        assert_eq!(distinguished_name(&[]).unwrap(), "");
        for bad in [
            &[0x31, 0x05, 0x30][..],
            &[0x30, 0x00],
            &[0x31, 0x84, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(distinguished_name(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn mapping_rules_follow_kafkas_syntax_and_order() {
        let rules = MappingRules::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=([^,]*),OU=(.*?),O=.*$/${1}@${2}/L,DEFAULT",
        )
        .unwrap();
        assert_eq!(
            rules.apply("CN=kafka,OU=ServiceUsers,O=X").unwrap(),
            "kafka"
        );
        assert_eq!(rules.apply("CN=Alice,OU=ENG,O=X").unwrap(), "alice@eng");
        assert_eq!(rules.apply("CN=bob").unwrap(), "CN=bob", "DEFAULT");
        let strict = MappingRules::parse("RULE:CN=(.*)/$1/U").unwrap();
        assert_eq!(strict.apply("CN=carol").unwrap(), "CAROL");
        assert_eq!(
            strict.apply("O=x,CN=carol"),
            None,
            "a rule matches the whole name"
        );
        let slash = MappingRules::parse("RULE:^CN=(.*)\\/x$/$1/").unwrap();
        assert_eq!(slash.apply("CN=a/x").unwrap(), "a");
        for bad in [
            "",
            "RULE:x",
            "RULE:x/y",
            "NOPE",
            "RULE:(/x/",
            "DEFAULT DEFAULT",
        ] {
            assert!(MappingRules::parse(bad).is_err(), "{bad}");
        }
    }
}
