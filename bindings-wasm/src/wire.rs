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
//! - `{"k":"eval","id","script","source"?,"sha"?,"keys","args"}` (`source` the
//!   first time this table sends that script: the driver keeps it by name;
//!   `sha` when the table asks for `EVALSHA` by it, else `EVAL` with the
//!   source. A driver may always send the source: the same script runs)
//! - `{"k":"subscribe"|"unsubscribe","id","channels"}` (one command for them all)
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
//!
//! Both directions are typed (serde derive, no `serde_json::Value` maps):
//! four of these calls run per acquire+release, and building and dropping a
//! `BTreeMap` for every object, each answer's and each reply's, was most of
//! the module's time on that path.

use std::fmt;

use polylock_core::{Command, Event, LockStatus, Op, Output, RedisOp, RedisValue, Reply, TransportError};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
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
    Answer { result: Err(payload(&Error::Closed)), out: Vec::new() }.to_json()
}

/// A request field that is missing or of the wrong type: a bug of the JS
/// driver, reported as a protocol error rather than a panic in the module.
pub fn bad_request(what: &str) -> Error {
    Error::Protocol(format!("polylock-wasm: bad request field {what:?}"))
}

/// A request that is not JSON of the expected shape (a bug of the JS driver).
pub fn malformed(e: &serde_json::Error) -> Error {
    Error::Protocol(format!("polylock-wasm: bad request: {e}"))
}

/// One answer: `{"ok": VALUE, "out": [...]}` or `{"err": PAYLOAD, "out": [...]}`.
pub struct Answer {
    pub result: Result<Value, Value>,
    pub out: Vec<Out>,
}

impl Answer {
    pub fn to_json(&self) -> String {
        // Serializing plain values and derived types cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Serialize for Answer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        match &self.result {
            Ok(v) => m.serialize_entry("ok", v)?,
            Err(e) => m.serialize_entry("err", e)?,
        }
        m.serialize_entry("out", &self.out)?;
        m.end()
    }
}

/// The `reply` of `{"op":"reply"}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyJson {
    /// Absent: not a Redis reply; present (`null` included): one.
    #[serde(default, deserialize_with = "present")]
    v: Option<JsonRedisValue>,
    #[serde(default)]
    done: bool,
    failed: Option<String>,
    refused: Option<String>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<JsonRedisValue>, D::Error> {
    JsonRedisValue::deserialize(d).map(Some)
}

impl ReplyJson {
    pub fn into_reply(self) -> Result<Reply, Error> {
        Ok(match self {
            ReplyJson { v: Some(JsonRedisValue(v)), .. } => Reply::Redis(v),
            ReplyJson { done: true, .. } => Reply::Done,
            ReplyJson { failed: Some(message), .. } => Reply::Failed(TransportError { message }),
            ReplyJson { refused: Some(text), .. } => Reply::Refused(text),
            _ => return Err(bad_request("reply")),
        })
    }
}

/// A Redis reply value as the driver writes it: `null`, `{"i":"<int>"}`,
/// `{"b":"<bytes>"}`, `{"s":"<status>"}` or an array of values.
struct JsonRedisValue(RedisValue);

impl<'de> Deserialize<'de> for JsonRedisValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RedisValueVisitor).map(JsonRedisValue)
    }
}

struct RedisValueVisitor;

impl<'de> Visitor<'de> for RedisValueVisitor {
    type Value = RedisValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Redis reply value: null, an array, or {\"i\"|\"b\"|\"s\": string}")
    }

    fn visit_unit<E: de::Error>(self) -> Result<RedisValue, E> {
        Ok(RedisValue::Nil)
    }

    fn visit_none<E: de::Error>(self) -> Result<RedisValue, E> {
        Ok(RedisValue::Nil)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RedisValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(JsonRedisValue(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(RedisValue::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RedisValue, A::Error> {
        let bad = |what: &str| de::Error::custom(format!("bad reply field {what:?}"));
        let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? else { return Err(bad("v")) };
        let text: std::borrow::Cow<'de, str> = map.next_value()?;
        let v = match key.as_ref() {
            "i" => RedisValue::Int(text.parse().map_err(|_| bad("i"))?),
            // One code point per byte (JS `latin1`): exact for any bytes.
            "b" => RedisValue::Bulk(text.chars().map(|c| c as u32 as u8).collect()),
            "s" => RedisValue::Status(text.into_owned()),
            _ => return Err(bad("v")),
        };
        if map.next_key::<de::IgnoredAny>()?.is_some() {
            return Err(bad("v"));
        }
        Ok(v)
    }
}

/// One output of the table, as the driver reads it (the `k` field names it).
#[derive(Serialize)]
#[serde(tag = "k", rename_all = "lowercase")]
pub enum Out {
    Granted {
        name: String,
        ticket: u64,
        owner: u64,
        token: String,
        reentry: u32,
    },
    Failed {
        name: String,
        ticket: u64,
        owner: u64,
        err: Value,
    },
    Lost {
        name: String,
        owner: u64,
        token: String,
        reason: String,
    },
    Released {
        id: u64,
    },
    Status {
        id: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        ok: Option<StatusJson>,
        #[serde(skip_serializing_if = "Option::is_none")]
        err: Option<Value>,
    },
    Eval {
        id: u64,
        script: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        source: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        sha: Option<&'static str>,
        keys: Vec<String>,
        args: Vec<String>,
    },
    Subscribe {
        id: u64,
        channels: Vec<String>,
    },
    Unsubscribe {
        id: u64,
        channels: Vec<String>,
    },
    Timeout {
        at: u64,
    },
    Unsupported {
        id: u64,
        op: String,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusJson {
    held: bool,
    holder: Option<String>,
    fencing_token: Option<String>,
    waiters: Option<usize>,
    ttl_ms: Option<i64>,
}

/// Encodes one output of the table. `first_use` says whether a script's
/// source must travel with it (the first time this table sends it).
pub fn output(out: Output, first_use: impl FnOnce(&'static str) -> bool) -> Option<Out> {
    Some(match out {
        Output::Event { name, event, .. } => event_out(name.as_str(), event)?,
        Output::Status { id, result } => match result {
            Ok(s) => Out::Status { id: id.0, ok: Some(status_json(&s)), err: None },
            Err(polylock_core::Error::NoAnswer(reason)) => {
                // As the runtime's `Client::status`: no answer is a connection error.
                let e = Error::Connect { addr: "redis".into(), reason };
                Out::Status { id: id.0, ok: None, err: Some(payload(&e)) }
            }
            Err(e) => Out::Status { id: id.0, ok: None, err: Some(payload(&Error::from_core("", e))) },
        },
        Output::Command(cmd) => command_out(cmd, first_use),
        Output::Timeout(at) => Out::Timeout { at: at.as_millis() },
        _ => return None,
    })
}

fn event_out(name: &str, event: Event) -> Option<Out> {
    Some(match event {
        Event::Granted { ticket, owner, token, reentry } => Out::Granted {
            name: name.to_owned(),
            ticket: ticket.0,
            owner: owner.0,
            token: token.0.to_string(),
            reentry,
        },
        Event::Failed { ticket, owner, error } => Out::Failed {
            name: name.to_owned(),
            ticket: ticket.0,
            owner: owner.0,
            err: payload(&Error::from_core(name, error)),
        },
        Event::Lost { owner, token, reason } => {
            Out::Lost { name: name.to_owned(), owner: owner.0, token: token.0.to_string(), reason: reason.to_string() }
        }
        Event::Released { id } => Out::Released { id: id.0 },
        _ => return None,
    })
}

fn status_json(s: &LockStatus) -> StatusJson {
    StatusJson {
        held: s.held,
        holder: s.holder.clone(),
        fencing_token: s.fencing_token.map(|t| t.to_string()),
        waiters: s.waiters,
        ttl_ms: s.ttl_ms,
    }
}

fn command_out(cmd: Command, first_use: impl FnOnce(&'static str) -> bool) -> Out {
    let Command { id, op } = cmd;
    match op {
        Op::Redis(RedisOp::Eval { script, keys, args, by_sha }) => {
            let source = first_use(script.name).then_some(script.source);
            let sha = by_sha.then(|| script.sha1());
            Out::Eval { id: id.0, script: script.name, source, sha, keys, args }
        }
        Op::Redis(RedisOp::Subscribe { channels }) => Out::Subscribe { id: id.0, channels },
        Op::Redis(RedisOp::Unsubscribe { channels }) => Out::Unsubscribe { id: id.0, channels },
        // The table is made for Redis only (see Driver::from_config).
        other => Out::Unsupported { id: id.0, op: format!("{other:?}") },
    }
}
