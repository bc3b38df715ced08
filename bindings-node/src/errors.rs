//! Runtime errors cross into JavaScript as plain `Error`s whose message starts
//! with a `[polylock:<Kind>]` tag; `index.js` turns the tag into the matching
//! error class. A tag in the message (rather than napi's `code`) survives every
//! napi path (sync throws and rejected promises alike).

use std::time::Duration;

use napi::Status;

/// The JS-visible kind of a runtime error.
fn kind(e: &polylock::Error) -> &'static str {
    use polylock::Error as E;
    match e {
        E::InvalidUrl { .. } => "InvalidUrl",
        E::InvalidName(_) => "InvalidName",
        E::InvalidOption(_) => "InvalidOption",
        E::Connect { .. } => "Connect",
        E::Timeout(_) => "Timeout",
        E::WouldBlock(_) => "WouldBlock",
        E::NotHeld(_) => "NotHeld",
        E::Lost { .. } => "Lost",
        E::Protocol(_) => "Protocol",
        E::Closed => "Closed",
        E::Cancelled => "Cancelled",
        E::Unavailable { .. } => "Unavailable",
        _ => "Error",
    }
}

pub(crate) fn tagged(kind: &str, message: impl std::fmt::Display) -> napi::Error {
    napi::Error::new(Status::GenericFailure, format!("[polylock:{kind}] {message}"))
}

pub(crate) fn to_napi(e: polylock::Error) -> napi::Error {
    tagged(kind(&e), &e)
}

/// Milliseconds from JavaScript (a double) to a `Duration`, refusing what the
/// JS layer should already have refused (NaN, negative, infinite).
pub(crate) fn millis(what: &str, ms: f64) -> napi::Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(tagged("InvalidOption", format!("{what} must be a finite number >= 0, got {ms}")));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}
