//! The console: a page, a script, a stylesheet and an icon built from `console/` by `npm run build`
//! into `console/dist/` (checked in, so `cargo build` needs no Node.js) and embedded here. The
//! page is served at `/` and at each page's own address (`/topics/<name>`, `/groups/<name>`),
//! so every link is a real one; everything it shows it reads from the admin API's JSON.
//!
//! Every admin response carries [`SECURITY_HEADERS`]: the page loads nothing but these files
//! and talks to nothing but this port.

#[derive(Debug, PartialEq, Eq)]
pub struct Asset {
    pub content_type: &'static str,
    pub body: &'static [u8],
}

const PAGE: Asset = Asset {
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../../../console/dist/index.html"),
};
const SCRIPT: Asset = Asset {
    content_type: "text/javascript; charset=utf-8",
    body: include_bytes!("../../../console/dist/app.js"),
};
const ICON: Asset = Asset {
    content_type: "image/svg+xml",
    body: include_bytes!("../../../console/dist/icon.svg"),
};
const STYLE: Asset = Asset {
    content_type: "text/css; charset=utf-8",
    body: include_bytes!("../../../console/dist/app.css"),
};

/// Sent with every admin response: a content security policy that allows the console's own
/// files and requests to this port only (no inline script or style, no frame, no form), and
/// no content-type sniffing or referrer.
pub const SECURITY_HEADERS: [(&str, &str); 3] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
         img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
];

/// The console file for a path: the page for `/` and its pages' addresses.
pub fn asset(path: &str) -> Option<&'static Asset> {
    match path {
        "/" | "/transactions" | "/security" => Some(&PAGE),
        "/console/app.js" => Some(&SCRIPT),
        "/console/app.css" => Some(&STYLE),
        // Browsers ask for it whatever the page names.
        "/console/icon.svg" | "/favicon.ico" => Some(&ICON),
        _ => {
            let page = ["/topics/", "/groups/", "/brokers/"]
                .iter()
                .any(|p| path.strip_prefix(p).is_some_and(|rest| !rest.is_empty()));
            page.then_some(&PAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_have_addresses_and_the_files_are_built() {
        for path in [
            "/",
            "/topics/orders",
            "/groups/a%20b",
            "/brokers/2",
            "/transactions",
            "/security",
        ] {
            assert_eq!(
                asset(path).map(|a| a.content_type),
                Some(PAGE.content_type),
                "{path}"
            );
        }
        for path in ["/topics/", "/groups", "/x", "/console/other.js"] {
            assert!(asset(path).is_none(), "{path}");
        }
        let page = std::str::from_utf8(PAGE.body).unwrap();
        // No inline script or style: the policy allows none.
        assert!(page.contains(r#"<script type="module" src="/console/app.js"></script>"#));
        assert!(!page.contains("<style") && !page.contains(" style="));
        assert!(SCRIPT.body.len() > 1000 && STYLE.body.len() > 100);
    }
}
