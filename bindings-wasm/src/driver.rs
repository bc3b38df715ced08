//! `Driver`: one client's [`LockTable`] behind JSON calls. Each call is one
//! table input (or a query), after which the table is drained to `None`
//! (the drive contract) and everything it produced goes back in the answer.
//! It keeps nothing of the locks: only which scripts this table has sent
//! (so each source crosses the boundary once).
//!
//! Time comes in as `now`, milliseconds on the driver's monotonic clock
//! (`performance.now()`): floored for inputs, and a deadline `timeoutMs` from
//! now is rounded up, so it never comes early (as the runtime's executor does).

use std::collections::HashSet;
use std::time::Duration;

use polylock_core::{
    AcquireOptions, Backend, ConnectionEvent, FencingToken, Instant, LockConfig, LockMode, LockName, LockTable, Nonce,
    Notification, OwnerId, ReleaseProgress, RequestId, Ticket,
};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::Error;
use crate::url::{self, Endpoint};
use crate::wire::{self, Answer, Out, ReplyJson};

/// The calls that only read (or make an error): no table input, no output.
const QUERIES: &[&str] = &["lock", "hold", "isHeldHere", "hasServerWork", "fail"];

#[derive(Debug)]
pub struct Driver {
    table: LockTable,
    scripts_sent: HashSet<&'static str>,
}

/// A request: every field any op takes, each checked by the op that needs
/// it. Numbers stay JSON values (a number, or a decimal string for a
/// token), which the helpers below check as the ops need them: no map is
/// built for the request.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Request {
    op: Option<String>,
    now: Option<Value>,
    name: Option<String>,
    owner: Option<Value>,
    timeout_ms: Option<Value>,
    lease_ms: Option<Value>,
    nonce: Option<String>,
    ticket: Option<Value>,
    token: Option<Value>,
    id: Option<Value>,
    reply: Option<ReplyJson>,
    channel: Option<String>,
    payload: Option<String>,
    up: Option<bool>,
    // `fail` and the config
    kind: Option<String>,
    addr: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    url: Option<String>,
    client_id: Option<String>,
}

fn str_field<'a>(v: &'a Option<String>, name: &str) -> Result<&'a str, Error> {
    v.as_deref().ok_or_else(|| wire::bad_request(name))
}

fn u64_field(v: &Option<Value>, name: &str) -> Result<u64, Error> {
    let v = v.as_ref().ok_or_else(|| wire::bad_request(name))?;
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).ok_or_else(|| wire::bad_request(name))
}

/// An optional number of milliseconds (absent or null: none).
fn ms_field(v: &Option<Value>, name: &str) -> Result<Option<f64>, Error> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(Some)
            .ok_or_else(|| Error::InvalidOption(format!("{name} must be a finite number >= 0, got {v}"))),
    }
}

fn duration(ms: f64) -> Duration {
    Duration::from_secs_f64(ms / 1000.0)
}

fn now_of(r: &Request) -> Result<(f64, Instant), Error> {
    let ms = r
        .now
        .as_ref()
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| wire::bad_request("now"))?;
    Ok((ms, Instant::from_millis(ms.floor() as u64)))
}

fn nonce_of(v: &Option<String>, name: &str) -> Result<Nonce, Error> {
    let hex = str_field(v, name)?;
    u128::from_str_radix(hex, 16).map(Nonce).map_err(|_| wire::bad_request(name))
}

fn lock_name(name: &str) -> Result<LockName, Error> {
    LockName::new(name).map_err(|e| Error::from_core(name, e))
}

/// The lease of a lock or client, checked as the runtime's `lock_with` does.
fn checked_lease(name: &str, lease_ms: Option<f64>) -> Result<Option<Duration>, Error> {
    let Some(ms) = lease_ms else { return Ok(None) };
    let lease = duration(ms);
    let mut cfg = LockConfig::new(Backend::Redis);
    cfg.set_lease(lease);
    cfg.validate().map_err(|e| Error::from_core(name, e))?;
    Ok(Some(lease))
}

impl Driver {
    /// A table from `{"url","leaseMs"?,"clientId"}`. The URL is parsed by the
    /// runtime's one parser; the answer tells the JS driver where to connect.
    /// Only Redis: the error for a ZooKeeper URL says why.
    pub fn from_config(config: &str) -> Result<(Driver, Value), String> {
        let fail = |e: Error| Answer { result: Err(wire::payload(&e)), out: Vec::new() }.to_json();
        let f: Request = serde_json::from_str(config).map_err(|_| fail(wire::bad_request("config")))?;
        let url = str_field(&f.url, "url").map_err(fail)?;
        let endpoint = match url::parse(url).map_err(fail)? {
            Endpoint::Redis { url, tls, ca, addr } => json!({ "url": url, "tls": tls, "ca": ca, "addr": addr }),
            Endpoint::Zk { .. } => {
                return Err(fail(Error::InvalidUrl {
                    url: url::redact(url),
                    reason: "polylock/wasm speaks Redis only: use the native polylock package for ZooKeeper".into(),
                }))
            }
            Endpoint::Sentinel(_) => {
                return Err(fail(Error::InvalidUrl {
                    url: url::redact(url),
                    reason: "polylock/wasm speaks to one Redis server: use the native polylock package for Sentinel"
                        .into(),
                }))
            }
            Endpoint::RedisCluster(_) => {
                return Err(fail(Error::InvalidUrl {
                    url: url::redact(url),
                    reason: "polylock/wasm speaks to one Redis server: use the native polylock package for a Redis \
                             Cluster"
                        .into(),
                }))
            }
        };
        let mut config = LockConfig::new(Backend::Redis);
        if let Some(lease) = checked_lease("", ms_field(&f.lease_ms, "leaseMs").map_err(fail)?).map_err(fail)? {
            config.set_lease(lease);
        }
        let client_id = nonce_of(&f.client_id, "clientId").map_err(fail)?;
        let table = LockTable::new(config, client_id).map_err(|e| fail(Error::from_core("", e)))?;
        let endpoint = json!({ "endpoint": endpoint, "id": client_id.to_uuid() });
        Ok((Driver { table, scripts_sent: HashSet::new() }, endpoint))
    }

    /// One request (`{"op":...}`); the answer as described in [`wire`].
    pub fn call(&mut self, request: &str) -> String {
        let (result, query) = match serde_json::from_str::<Request>(request) {
            Ok(mut r) => {
                let query = matches!(r.op.as_deref(), Some(op) if QUERIES.contains(&op));
                (self.dispatch(&mut r), query)
            }
            Err(e) => (Err(wire::malformed(&e)), true),
        };
        // A query is no input: the table has nothing new to say (and the
        // driver, which reads only its value, must not miss any output).
        let out = if query { Vec::new() } else { self.drain() };
        Answer { result: result.map_err(|e| wire::payload(&e)), out }.to_json()
    }

    fn dispatch(&mut self, f: &mut Request) -> Result<Value, Error> {
        let t = &mut self.table;
        match str_field(&f.op, "op")? {
            // ---- from the application
            "lock" => {
                let name = str_field(&f.name, "name")?;
                checked_lease(lock_name(name)?.as_str(), ms_field(&f.lease_ms, "leaseMs")?)?;
                Ok(Value::Null)
            }
            "acquire" => {
                let (now_ms, now) = now_of(f)?;
                let name = lock_name(str_field(&f.name, "name")?)?;
                let lease = checked_lease(name.as_str(), ms_field(&f.lease_ms, "leaseMs")?)?;
                let opts = match ms_field(&f.timeout_ms, "timeoutMs")? {
                    None => AcquireOptions { lease, ..AcquireOptions::default() },
                    Some(0.0) => AcquireOptions { no_wait: true, lease, ..AcquireOptions::default() },
                    Some(ms) => {
                        let deadline = Instant::from_millis((now_ms + ms).ceil() as u64);
                        AcquireOptions { deadline: Some(deadline), lease, ..AcquireOptions::default() }
                    }
                };
                let owner = OwnerId(u64_field(&f.owner, "owner")?);
                let ticket = t.acquire(now, &name, LockMode::Exclusive, owner, opts, nonce_of(&f.nonce, "nonce")?);
                Ok(json!(ticket.map_err(|e| Error::from_core(name.as_str(), e))?.0))
            }
            // An aborted acquire: its `failed` (`cancelled`) comes once the
            // server holds nothing of it (LockMachine::withdraw), or its
            // grant if that came first. False if it waits no more.
            "withdraw" => {
                let (_, now) = now_of(f)?;
                Ok(json!(t.withdraw(now, Ticket(u64_field(&f.ticket, "ticket")?))))
            }
            "release" => {
                let (_, now) = now_of(f)?;
                let name = str_field(&f.name, "name")?;
                let token = match f.token {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(FencingToken(u64_field(&f.token, "token")?)),
                };
                match t.release(now, name, LockMode::Exclusive, OwnerId(u64_field(&f.owner, "owner")?), token) {
                    Ok(ReleaseProgress::StillHeld { remaining }) => Ok(json!({ "stillHeld": remaining })),
                    Ok(ReleaseProgress::Releasing(id)) => Ok(json!({ "releasing": id.0 })),
                    Err(e) => Err(Error::from_core(name, e)),
                }
            }
            "grantUnwanted" => {
                let (_, now) = now_of(f)?;
                let (name, owner) = (str_field(&f.name, "name")?, OwnerId(u64_field(&f.owner, "owner")?));
                t.grant_unwanted(now, name, LockMode::Exclusive, owner, FencingToken(u64_field(&f.token, "token")?));
                Ok(json!(t.hold(name, LockMode::Exclusive, owner).is_some()))
            }
            "status" => Ok(json!(t.read_status(&lock_name(str_field(&f.name, "name")?)?).0)),
            "close" => {
                t.close(now_of(f)?.1);
                Ok(Value::Null)
            }
            // ---- from the connection and the timer
            "reply" => {
                let (_, now) = now_of(f)?;
                let id = RequestId(u64_field(&f.id, "id")?);
                let reply = f.reply.take().ok_or_else(|| wire::bad_request("reply"))?.into_reply()?;
                t.handle_reply(now, id, reply);
                Ok(Value::Null)
            }
            "message" => {
                let (_, now) = now_of(f)?;
                let channel = f.channel.take().ok_or_else(|| wire::bad_request("channel"))?;
                let payload = f.payload.take().ok_or_else(|| wire::bad_request("payload"))?;
                t.handle_notification(now, Notification::Message { channel, payload });
                Ok(Value::Null)
            }
            "connection" => {
                let (_, now) = now_of(f)?;
                let up = f.up.ok_or_else(|| wire::bad_request("up"))?;
                t.handle_connection(now, if up { ConnectionEvent::Connected } else { ConnectionEvent::Disconnected });
                Ok(Value::Null)
            }
            "timeout" => {
                t.handle_timeout(now_of(f)?.1);
                Ok(Value::Null)
            }
            // ---- queries (no input, nothing to drain)
            "hold" => {
                let hold =
                    t.hold(str_field(&f.name, "name")?, LockMode::Exclusive, OwnerId(u64_field(&f.owner, "owner")?));
                Ok(hold.map_or(Value::Null, |(count, token)| json!({ "count": count, "token": token.0.to_string() })))
            }
            "isHeldHere" => Ok(json!(t.is_held_here(str_field(&f.name, "name")?, LockMode::Exclusive))),
            "hasServerWork" => Ok(json!(t.has_server_work())),
            // ---- errors only the JS driver sees, made from the one error table
            "fail" => Err(match str_field(&f.kind, "kind")? {
                "connect" => Error::Connect {
                    addr: str_field(&f.addr, "addr")?.into(),
                    reason: str_field(&f.reason, "reason")?.into(),
                },
                "closed" => Error::Closed,
                "cancelled" => Error::Cancelled,
                "invalid_option" => Error::InvalidOption(str_field(&f.message, "message")?.into()),
                _ => wire::bad_request("kind"),
            }),
            _ => Err(wire::bad_request("op")),
        }
    }

    /// The drive contract: every output until `None`, in order.
    fn drain(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        while let Some(o) = self.table.poll_output() {
            let sent = &mut self.scripts_sent;
            if let Some(v) = wire::output(o, |name| sent.insert(name)) {
                out.push(v);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "000102030405060708090a0b0c0d0e0f";

    fn driver() -> Driver {
        Driver::from_config(&json!({ "url": "redis://127.0.0.1:6379", "clientId": ID }).to_string()).unwrap().0
    }

    fn call(d: &mut Driver, req: Value) -> Value {
        serde_json::from_str(&d.call(&req.to_string())).unwrap()
    }

    fn acquire(d: &mut Driver, now: f64, name: &str, timeout_ms: Option<f64>) -> Value {
        call(
            d,
            json!({ "op": "acquire", "now": now, "name": name, "owner": 1, "timeoutMs": timeout_ms, "nonce": "ff" }),
        )
    }

    /// The table's first commands, as the JS driver would send them.
    fn kinds(answer: &Value) -> Vec<String> {
        answer["out"].as_array().unwrap().iter().map(|o| o["k"].as_str().unwrap().to_owned()).collect()
    }

    #[test]
    fn an_uncontended_acquire_is_one_eval_and_its_reply_a_grant_then_the_renewal_timer() {
        let mut d = driver();
        let a = acquire(&mut d, 0.4, "orders/42", None);
        assert_eq!(a["ok"], json!(1), "{a}");
        assert_eq!(kinds(&a), ["eval"]);
        let eval = &a["out"][0];
        assert_eq!(eval["script"], "polylock_acquire");
        assert!(eval["source"].as_str().unwrap().contains("redis.call"), "the first use carries the source");
        let reply = json!({ "v": [{ "i": "1" }, { "i": "9007199254740993" }] });
        let r = call(&mut d, json!({ "op": "reply", "now": 1.0, "id": eval["id"], "reply": reply }));
        assert_eq!(kinds(&r), ["granted", "timeout"], "{r}");
        assert_eq!(r["out"][0]["token"], "9007199254740993", "a token above 2^53 stays exact");
        assert_eq!(r["out"][1]["at"], 10_000, "renewal at a third of the 30 s lease");
        let h = call(&mut d, json!({ "op": "hold", "name": "orders/42", "owner": 1 }));
        assert_eq!(h["ok"], json!({ "count": 1, "token": "9007199254740993" }));

        let rel = call(
            &mut d,
            json!({ "op": "release", "now": 2.0, "name": "orders/42", "owner": 1, "token": "9007199254740993" }),
        );
        assert_eq!(rel["ok"]["releasing"], 1, "{rel}");
        assert_eq!(kinds(&rel), ["eval"]);
        // Another lock's acquire runs the same script: its source does not cross again.
        let again = acquire(&mut d, 3.0, "orders/43", Some(0.0));
        assert_eq!(again["out"][0]["script"], "polylock_acquire", "{again}");
        assert!(again["out"][0].get("source").is_none(), "{again}");
    }

    #[test]
    fn errors_carry_the_native_packages_payload() {
        let mut d = driver();
        let bad = call(&mut d, json!({ "op": "lock", "name": "a//b" }));
        assert_eq!(bad["err"]["kind"], "invalid_name", "{bad}");
        let not_held = call(&mut d, json!({ "op": "release", "now": 0, "name": "x", "owner": 7 }));
        assert_eq!(not_held["err"]["kind"], "not_held");
        assert_eq!(not_held["err"]["lockName"], "x");
        assert_eq!(not_held["err"]["message"], "lock \"x\" is not held by this owner");
        let lease = call(&mut d, json!({ "op": "lock", "name": "x", "leaseMs": 0 }));
        assert_eq!(lease["err"]["kind"], "invalid_option", "{lease}");
    }

    #[test]
    fn a_zero_timeout_try_on_a_held_lock_fails_would_block() {
        let mut d = driver();
        let a = acquire(&mut d, 0.0, "orders/42", Some(0.0));
        // The server says: held by someone else (0), with the TTL left.
        let r = call(
            &mut d,
            json!({ "op": "reply", "now": 1.0, "id": a["out"][0]["id"], "reply": { "v": [{ "i": "0" }, { "i": "500" }] } }),
        );
        let failed = &r["out"][0];
        assert_eq!(failed["k"], "failed", "{r}");
        assert_eq!(failed["err"]["kind"], "would_block");
    }

    #[test]
    fn a_withdrawn_acquire_fails_cancelled_once_its_leave_is_answered() {
        let mut d = driver();
        let a = acquire(&mut d, 0.0, "orders/42", None);
        let ticket = a["ok"].clone();
        // Queued behind a holder: the acquire script's answer, then what it starts (subscriptions, a recheck).
        let queued = json!({ "v": [{ "i": "0" }, { "i": "5000" }, { "i": "1" }] });
        let r = call(&mut d, json!({ "op": "reply", "now": 1.0, "id": a["out"][0]["id"], "reply": queued }));
        assert!(!kinds(&r).contains(&"failed".to_owned()), "{r}");
        let w = call(&mut d, json!({ "op": "withdraw", "now": 2.0, "name": "orders/42", "ticket": ticket }));
        assert_eq!(w["ok"], true, "{w}");
        assert!(w["out"].as_array().unwrap().iter().any(|o| o["script"] == "polylock_leave"), "no LEAVE: {w}");
        assert!(!kinds(&w).contains(&"failed".to_owned()), "told before the LEAVE is answered: {w}");
        let mut out = Vec::new();
        for o in w["out"].as_array().unwrap().iter().filter(|o| o.get("id").is_some()) {
            let reply = if o["k"] == "eval" { json!({ "v": { "i": "0" } }) } else { json!({ "done": true }) };
            let r = call(&mut d, json!({ "op": "reply", "now": 3.0, "id": o["id"], "reply": reply }));
            assert!(r.get("err").is_none(), "{r}");
            out.extend(r["out"].as_array().unwrap().iter().cloned());
        }
        let failed = out.iter().find(|o| o["k"] == "failed").expect("the failure once the LEAVE is answered");
        let r = json!(out);
        assert_eq!(failed["err"]["kind"], "cancelled", "{r}");
        assert_eq!(failed["ticket"], ticket);
    }

    #[test]
    fn zookeeper_urls_are_refused_with_the_reason_and_bad_urls_as_the_runtime_says() {
        let zk = Driver::from_config(&json!({ "url": "zk://127.0.0.1:2181", "clientId": ID }).to_string()).unwrap_err();
        let zk: Value = serde_json::from_str(&zk).unwrap();
        assert_eq!(zk["err"]["kind"], "invalid_url");
        assert!(zk["err"]["message"].as_str().unwrap().contains("Redis only"), "{zk}");
        let cluster =
            Driver::from_config(&json!({ "url": "redis+cluster://h:1,h:2", "clientId": ID }).to_string()).unwrap_err();
        assert!(cluster.contains("invalid_url") && cluster.contains("for a Redis Cluster"), "{cluster}");
        let port = Driver::from_config(&json!({ "url": "redis://h:0", "clientId": ID }).to_string()).unwrap_err();
        assert!(port.contains("port 0 is not allowed"), "{port}");
        let (_, endpoint) =
            Driver::from_config(&json!({ "url": "redis://u:p@h:1/2", "clientId": ID }).to_string()).unwrap();
        assert_eq!(
            endpoint["endpoint"],
            json!({ "url": "redis://u:p@h:1/2", "tls": false, "ca": null, "addr": "h:1" })
        );
    }

    #[test]
    fn a_bulk_reply_keeps_every_byte() {
        let json = json!({ "v": { "b": "a\u{00ff}\u{0000}" } });
        let v = serde_json::from_value::<wire::ReplyJson>(json).unwrap().into_reply().unwrap();
        assert_eq!(v, polylock_core::Reply::Redis(polylock_core::RedisValue::Bulk(vec![b'a', 0xff, 0])));
    }
}
