//! The JSON that crosses the module boundary: replies in, outputs and
//! error payloads out.
//!
//! Every answer of [`crate::driver::Driver::call`] is one object:
//! `{"ok": VALUE, "out": [OUTPUT...]}` or `{"err": PAYLOAD, "out": [...]}`,
//! where `out` is everything the table produced, drained to `None`, in order:
//!
//! - `{"k":"granted","name","ticket","owner","token","reentry"}`
//! - `{"k":"failed","name","ticket","owner","err":PAYLOAD}`
//! - `{"k":"lost","name","owner","token","reason"}`
//! - `{"k":"released","id"}`
//! - `{"k":"status","id","ok":{held,holder,fencingToken,waiters,ttlMs}}` or `"err"`
//! - `{"k":"eval","id","script","source"?,"keys","args"}` (`source` the
//!   first time this table sends that script: the driver keeps it by name)
//! - `{"k":"subscribe"|"unsubscribe","id","channel"}`
//! - `{"k":"timeout","at"}` (milliseconds on the driver's clock)
//!
//! Fencing tokens travel as decimal strings (JavaScript makes BigInts of
//! them); ids, owners and instants are below 2^53.
//!
//! A PAYLOAD is the Node package's error payload (`bindings-node/src/errors.rs`):
//! `{"kind","message","lockName","address","reason","reply","url"}`, which
//! `errors.js` turns into the same error classes as the native addon's.
//!
//! A reply (the `reply` field of `{"op":"reply"}`) is one of
//! `{"v": VALUE}` (a Redis reply: `null`, `{"i":"<int>"}`, `{"b":"<bytes>"}`,
//! `{"s":"<status>"}` or an array of values; bulk bytes as a string of
//! code points 0..=255, one per byte), `{"done":true}`,
//! `{"failed":"<why>"}` (no answer: timed out, connection lost) or
//! `{"refused":"<server error text>"}`.

use polylock_core::{Command, Event, LockStatus, Op, Output, RedisOp, RedisValue, Reply, TransportError};
use serde_json::{json, Value};

use crate::error::Error;

/// The error payload of a runtime error, as `bindings-node/src/errors.rs` makes it.
pub fn payload(e: &Error) -> Value {
    json!({
        "kind": e.kind().as_str(),
        "message": e.to_string(),
        "lockName": e.lock_name(),
        "address": e.address(),
        "reason": e.reason(),
        "reply": e.reply(),
        "url": e.url(),
    })
}

/// The answer to a call on a handle that names no table.
pub fn no_table() -> String {
    let e = Error::Closed;
    json!({ "err": payload(&e), "out": [] }).to_string()
}

/// A request field that is missing or of the wrong type: a bug of the JS
/// driver, reported as a protocol error rather than a panic in the module.
pub fn bad_request(what: &str) -> Error {
    Error::Protocol(format!("polylock-wasm: bad request field {what:?}"))
}

/// Decodes a reply from the driver.
pub fn reply(v: &Value) -> Result<Reply, Error> {
    let obj = v.as_object().ok_or_else(|| bad_request("reply"))?;
    if let Some(value) = obj.get("v") {
        return redis_value(value).map(Reply::Redis);
    }
    if obj.contains_key("done") {
        return Ok(Reply::Done);
    }
    if let Some(why) = obj.get("failed") {
        return Ok(Reply::Failed(TransportError { message: why.as_str().unwrap_or("no answer").to_owned() }));
    }
    if let Some(text) = obj.get("refused") {
        return Ok(Reply::Refused(text.as_str().unwrap_or_default().to_owned()));
    }
    Err(bad_request("reply"))
}

fn redis_value(v: &Value) -> Result<RedisValue, Error> {
    Ok(match v {
        Value::Null => RedisValue::Nil,
        Value::Array(items) => RedisValue::Array(items.iter().map(redis_value).collect::<Result<_, _>>()?),
        Value::Object(o) => {
            if let Some(i) = o.get("i") {
                let text = i.as_str().ok_or_else(|| bad_request("i"))?;
                RedisValue::Int(text.parse().map_err(|_| bad_request("i"))?)
            } else if let Some(b) = o.get("b") {
                let text = b.as_str().ok_or_else(|| bad_request("b"))?;
                // One code point per byte (JS `latin1`): exact for any bytes.
                RedisValue::Bulk(text.chars().map(|c| c as u32 as u8).collect())
            } else if let Some(s) = o.get("s") {
                RedisValue::Status(s.as_str().ok_or_else(|| bad_request("s"))?.to_owned())
            } else {
                return Err(bad_request("v"));
            }
        }
        _ => return Err(bad_request("v")),
    })
}

/// Encodes one output of the table. `first_use` says whether a script's
/// source must travel with it (the first time this table sends it).
pub fn output(out: Output, first_use: impl FnOnce(&'static str) -> bool) -> Option<Value> {
    Some(match out {
        Output::Event { name, event, .. } => event_json(name.as_str(), event)?,
        Output::Status { id, result } => match result {
            Ok(s) => json!({ "k": "status", "id": id.0, "ok": status_json(&s) }),
            Err(polylock_core::Error::NoAnswer(reason)) => {
                // As the runtime's `Client::status`: no answer is a connection error.
                let e = Error::Connect { addr: "redis".into(), reason };
                json!({ "k": "status", "id": id.0, "err": payload(&e) })
            }
            Err(e) => json!({ "k": "status", "id": id.0, "err": payload(&Error::from_core("", e)) }),
        },
        Output::Command(cmd) => command_json(cmd, first_use),
        Output::Timeout(at) => json!({ "k": "timeout", "at": at.as_millis() }),
        _ => return None,
    })
}

fn event_json(name: &str, event: Event) -> Option<Value> {
    Some(match event {
        Event::Granted { ticket, owner, token, reentry } => json!({
            "k": "granted", "name": name, "ticket": ticket.0, "owner": owner.0,
            "token": token.0.to_string(), "reentry": reentry,
        }),
        Event::Failed { ticket, owner, error } => json!({
            "k": "failed", "name": name, "ticket": ticket.0, "owner": owner.0,
            "err": payload(&Error::from_core(name, error)),
        }),
        Event::Lost { owner, token, reason } => json!({
            "k": "lost", "name": name, "owner": owner.0, "token": token.0.to_string(), "reason": reason.to_string(),
        }),
        Event::Released { id } => json!({ "k": "released", "id": id.0 }),
        _ => return None,
    })
}

fn status_json(s: &LockStatus) -> Value {
    json!({
        "held": s.held,
        "holder": s.holder,
        "fencingToken": s.fencing_token.map(|t| t.to_string()),
        "waiters": s.waiters,
        "ttlMs": s.ttl_ms,
    })
}

fn command_json(cmd: Command, first_use: impl FnOnce(&'static str) -> bool) -> Value {
    let Command { id, op } = cmd;
    match op {
        Op::Redis(RedisOp::Eval { script, keys, args }) => {
            let mut v = json!({ "k": "eval", "id": id.0, "script": script.name, "keys": keys, "args": args });
            if first_use(script.name) {
                v["source"] = Value::from(script.source);
            }
            v
        }
        Op::Redis(RedisOp::Subscribe { channel }) => json!({ "k": "subscribe", "id": id.0, "channel": channel }),
        Op::Redis(RedisOp::Unsubscribe { channel }) => json!({ "k": "unsubscribe", "id": id.0, "channel": channel }),
        // The table is made for Redis only (see Driver::from_config).
        other => json!({ "k": "unsupported", "id": id.0, "op": format!("{other:?}") }),
    }
}
