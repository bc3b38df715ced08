//! Runtime errors cross into JavaScript as plain `Error`s whose message is
//! [`PAYLOAD_PREFIX`] followed by a JSON object: the stable kind
//! (`polylock::ErrorKind::as_str`), the human message and the structured
//! fields (`lockName`, `address`, `reason`, `reply`, `url`, `permits`). `errors.js`
//! parses that object and builds the matching error class from its fields;
//! nothing reads the English message. A payload in the message (rather than
//! napi's `code` or extra properties) survives every napi path (sync throws
//! and rejected promises alike).
//!
//! This module is the binding's one error table: every native call maps its
//! runtime error with [`NapiErrorExt::napi_err`].

use std::time::Duration;

use napi::Status;
use polylock::ErrorKind;

/// What starts the message of every error this layer makes (`errors.js`
/// checks for it with `startsWith`).
const PAYLOAD_PREFIX: &str = "polylock:";

/// Maps a runtime `Result` onto napi's, once per call site.
pub(crate) trait NapiErrorExt<T> {
    fn napi_err(self) -> napi::Result<T>;
}

impl<T> NapiErrorExt<T> for Result<T, polylock::Error> {
    fn napi_err(self) -> napi::Result<T> {
        self.map_err(to_napi)
    }
}

fn with_payload(payload: serde_json::Value) -> napi::Error {
    napi::Error::new(Status::GenericFailure, format!("{PAYLOAD_PREFIX}{payload}"))
}

/// An error this layer raises itself (a bad argument, a second release),
/// of a runtime kind so JavaScript sees the same class.
pub(crate) fn binding_error(kind: ErrorKind, message: impl std::fmt::Display) -> napi::Error {
    with_payload(serde_json::json!({ "kind": kind.as_str(), "message": message.to_string() }))
}

pub(crate) fn to_napi(e: polylock::Error) -> napi::Error {
    with_payload(serde_json::json!({
        "kind": e.kind().as_str(),
        "message": e.to_string(),
        "lockName": e.lock_name(),
        "address": e.address(),
        "reason": e.reason(),
        "reply": e.reply(),
        "url": e.url(),
        "permits": e.permits().map(|(server, ours)| serde_json::json!({ "server": server, "ours": ours })),
    }))
}

/// Milliseconds from JavaScript (a double) to a `Duration`, refusing what the
/// JS layer should already have refused (NaN, negative, infinite).
pub(crate) fn millis(what: &str, ms: f64) -> napi::Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(binding_error(ErrorKind::InvalidOption, format!("{what} must be a finite number >= 0, got {ms}")));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}
