//! IncrementalAlterConfigs (KIP-339) for one topic, through librdkafka's C API.
//!
//! The `rdkafka` crate (0.39) wraps only the legacy AlterConfigs request, which replaces a
//! resource's whole configuration and which Strata does not implement. librdkafka itself has
//! `rd_kafka_IncrementalAlterConfigs` (set/delete individual keys); this module calls it
//! through the raw bindings `rdkafka` re-exports, on a private result queue, and waits for
//! the result with a deadline.

// Calls librdkafka's C API directly (see above).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::RDKafkaErrorCode;

/// One change to a topic's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set `key` to `value`.
    Set(String, String),
    /// Remove the topic's override of `key`, reverting it to the broker default.
    Delete(String),
}

/// Why an incremental alter failed.
#[derive(Debug)]
pub enum AlterFailure {
    /// The broker does not support IncrementalAlterConfigs; the legacy API may work.
    Unsupported(String),
    /// Any other failure, with a message for the user.
    Failed(String),
}

impl std::fmt::Display for AlterFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AlterFailure::Unsupported(m) | AlterFailure::Failed(m) => f.write_str(m),
        }
    }
}

/// Owns a librdkafka object and destroys it on drop.
struct Owned<T> {
    ptr: *mut T,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Owned<T> {
    fn new(
        ptr: *mut T,
        destroy: unsafe extern "C" fn(*mut T),
        what: &str,
    ) -> Result<Self, AlterFailure> {
        if ptr.is_null() {
            Err(AlterFailure::Failed(format!(
                "librdkafka could not allocate {what}"
            )))
        } else {
            Ok(Owned { ptr, destroy })
        }
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` is non-null, was returned by the librdkafka constructor matching
        // `destroy`, and is destroyed exactly once, here.
        unsafe { (self.destroy)(self.ptr) }
    }
}

/// Copies a C string librdkafka returned; empty for null.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string valid for the duration of the call.
unsafe fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

fn c_str(s: &str) -> Result<CString, AlterFailure> {
    CString::new(s).map_err(|_| AlterFailure::Failed(format!("`{s}` contains a NUL byte")))
}

fn is_unsupported(code: rd::rd_kafka_resp_err_t) -> bool {
    matches!(
        code,
        rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE
            | rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION
    )
}

/// Applies `ops` to `topic`'s configuration with IncrementalAlterConfigs, waiting at most
/// `timeout` (plus a small grace period) for the broker's answer.
pub fn alter_topic<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    ops: &[ConfigOp],
    timeout: Duration,
) -> Result<(), AlterFailure> {
    let rk = client.native_ptr();
    let name = c_str(topic)?;
    let timeout_ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);

    // SAFETY (whole function): every pointer passed to librdkafka is either `rk` (kept alive
    // by `client` for the duration of the call), an `Owned` object created here and alive
    // until the end of the function, or a `CString` that outlives the call it is passed to.
    // librdkafka copies the config resources and options when the request is enqueued.
    let resource = Owned::new(
        unsafe {
            rd::rd_kafka_ConfigResource_new(
                rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                name.as_ptr(),
            )
        },
        rd::rd_kafka_ConfigResource_destroy,
        "a config resource",
    )?;
    for op in ops {
        let (key, value, op_type) = match op {
            ConfigOp::Set(k, v) => (
                c_str(k)?,
                Some(c_str(v)?),
                rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET,
            ),
            ConfigOp::Delete(k) => (
                c_str(k)?,
                None,
                rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE,
            ),
        };
        let value_ptr = value.as_ref().map_or(ptr::null(), |v| v.as_ptr());
        let err = unsafe {
            rd::rd_kafka_ConfigResource_add_incremental_config(
                resource.ptr,
                key.as_ptr(),
                op_type,
                value_ptr,
            )
        };
        if !err.is_null() {
            let err = Owned::new(err, rd::rd_kafka_error_destroy, "an error")?;
            let msg = unsafe { c_string(rd::rd_kafka_error_string(err.ptr)) };
            return Err(AlterFailure::Failed(format!(
                "invalid config change for `{}`: {msg}",
                key.to_string_lossy()
            )));
        }
    }

    let options = Owned::new(
        unsafe {
            rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS,
            )
        },
        rd::rd_kafka_AdminOptions_destroy,
        "admin options",
    )?;
    let mut errstr = [0 as c_char; 512];
    let code = unsafe {
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        )
    };
    if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        let msg = unsafe { c_string(errstr.as_ptr()) };
        return Err(AlterFailure::Failed(format!("request timeout: {msg}")));
    }

    let queue = Owned::new(
        unsafe { rd::rd_kafka_queue_new(rk) },
        rd::rd_kafka_queue_destroy,
        "a result queue",
    )?;
    let mut resources = [resource.ptr];
    unsafe {
        rd::rd_kafka_IncrementalAlterConfigs(
            rk,
            resources.as_mut_ptr(),
            resources.len(),
            options.ptr,
            queue.ptr,
        );
    }

    // librdkafka enforces the request timeout itself; the grace period only guards against
    // a result that never arrives.
    let wait_ms = timeout_ms.saturating_add(5_000);
    let event = unsafe { rd::rd_kafka_queue_poll(queue.ptr, wait_ms) };
    if event.is_null() {
        return Err(AlterFailure::Failed(format!(
            "no IncrementalAlterConfigs result within {wait_ms} ms"
        )));
    }
    let event = Owned::new(event, rd::rd_kafka_event_destroy, "an event")?;

    let code = unsafe { rd::rd_kafka_event_error(event.ptr) };
    if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        let msg = unsafe { c_string(rd::rd_kafka_event_error_string(event.ptr)) };
        let msg = format!("IncrementalAlterConfigs failed: {msg}");
        return Err(if is_unsupported(code) {
            AlterFailure::Unsupported(msg)
        } else {
            AlterFailure::Failed(msg)
        });
    }
    let result = unsafe { rd::rd_kafka_event_IncrementalAlterConfigs_result(event.ptr) };
    if result.is_null() {
        let typ = unsafe { rd::rd_kafka_event_type(event.ptr) };
        return Err(AlterFailure::Failed(format!(
            "IncrementalAlterConfigs: unexpected result event type {typ}"
        )));
    }
    let mut count = 0usize;
    let results =
        unsafe { rd::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut count) };
    if results.is_null() || count == 0 {
        return Err(AlterFailure::Failed(
            "IncrementalAlterConfigs: the broker returned no result for the topic".to_string(),
        ));
    }
    for i in 0..count {
        // SAFETY: librdkafka returned an array of `count` resources owned by `event`.
        let r = unsafe { *results.add(i) };
        let code = unsafe { rd::rd_kafka_ConfigResource_error(r) };
        if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            let detail = unsafe { c_string(rd::rd_kafka_ConfigResource_error_string(r)) };
            let code_text = RDKafkaErrorCode::from(code).to_string();
            let msg = if detail.is_empty() || detail == code_text {
                format!("topic `{topic}`: {code_text}")
            } else {
                format!("topic `{topic}`: {code_text}: {detail}")
            };
            return Err(if is_unsupported(code) {
                AlterFailure::Unsupported(msg)
            } else {
                AlterFailure::Failed(msg)
            });
        }
    }
    Ok(())
}
