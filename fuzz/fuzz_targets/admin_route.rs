//! An admin HTTP request line: `METHOD URI`, routed as the admin server routes every request
//! before anything runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |b| *b == b' ');
    let (Some(method), Some(uri)) = (parts.next(), parts.next()) else {
        return;
    };
    let (Ok(method), Ok(uri)) = (
        hyper::Method::from_bytes(method),
        hyper::Uri::try_from(uri),
    ) else {
        return;
    };
    let _ = strata_broker::admin::http::Route::parse(&method, &uri);
});
