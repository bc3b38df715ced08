//! Connection strings. One parser, so every language accepts the same URLs:
//!
//! - `redis://[user:pass@]host:port[/db]`, `rediss://...` for TLS
//!   (`#insecure` is not accepted; use `?ca=/path/ca.pem` for a private CA);
//! - `zk://[user:pass@]host1:2181[,host2:2181...][/chroot]` (digest auth from
//!   the user info), `zks://...` for TLS with `?ca=/path/ca.pem`;
//! - `redis+sentinel://[user:pass@]h1:26379[,h2:26379...]/<master name>`
//!   `[?db=N&sentinel_user=..&sentinel_password=..&replicas=K|all]`, and
//!   `rediss+sentinel://...` (TLS to sentinels and data nodes, `ca=` as above);
//! - `redis+cluster://[user:pass@]host1:port1[,host2:port2...][?replicas=K]`,
//!   `rediss+cluster://...` for TLS (with `ca=`): the seed nodes of a Redis
//!   Cluster, from which the rest of it is discovered.

use polylock_core::ReplicasAsked;

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Redis {
        /// The URL as the `redis` crate takes it (our own query removed).
        url: String,
        tls: bool,
        ca: Option<String>,
        /// host:port for messages.
        addr: String,
    },
    Zk {
        /// `host:port,host:port/chroot`, hosts prefixed `tcp+tls://` under TLS.
        connect: String,
        auth: Option<(String, String)>,
        tls: bool,
        ca: Option<String>,
        addr: String,
    },
    Sentinel(SentinelEndpoint),
    RedisCluster(ClusterUrl),
}

/// A Redis Cluster's seed nodes, from a `redis+cluster://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterUrl {
    /// One URL per seed node as the `redis` crate takes it
    /// (`redis://[user:pass@]host:port` or `rediss://...`).
    pub(crate) nodes: Vec<String>,
    pub(crate) tls: bool,
    pub(crate) ca: Option<String>,
    /// The replicas each grant waits for (`replicas=K`, default 0).
    pub(crate) replicas: u32,
    /// `host:port,host:port` for messages.
    pub(crate) addr: String,
}

/// A Redis master found through its sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelEndpoint {
    /// host:port of each sentinel, in the URL's order.
    pub(crate) sentinels: Vec<String>,
    /// The name the sentinels monitor the master under.
    pub(crate) master: String,
    pub(crate) tls: bool,
    pub(crate) ca: Option<String>,
    /// `user:pass` (or `user`) for the data nodes, as written in the URL.
    pub(crate) userinfo: Option<String>,
    pub(crate) db: Option<u16>,
    /// `user:pass` (or `:pass`) for the sentinels, URL-encoded as written.
    pub(crate) sentinel_userinfo: Option<String>,
    /// `replicas=K` or `replicas=all`: which replicas must acknowledge
    /// each grant and renewal.
    pub(crate) replicas: ReplicasAsked,
}

impl SentinelEndpoint {
    fn scheme(&self) -> &'static str {
        if self.tls {
            "rediss"
        } else {
            "redis"
        }
    }

    /// The URL of the sentinel at `addr`, as the `redis` crate takes it.
    pub(crate) fn sentinel_url(&self, addr: &str) -> String {
        match &self.sentinel_userinfo {
            Some(u) => format!("{}://{u}@{addr}", self.scheme()),
            None => format!("{}://{addr}", self.scheme()),
        }
    }

    /// The URL of the data node at `host`:`port` (as a sentinel names it).
    pub(crate) fn data_url(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_owned() };
        let auth = self.userinfo.as_ref().map(|u| format!("{u}@")).unwrap_or_default();
        format!("{}://{auth}{host}:{port}/{}", self.scheme(), self.db.unwrap_or(0))
    }
}

fn bad(url: &str, reason: impl Into<String>) -> Error {
    Error::InvalidUrl { url: redact(url), reason: reason.into() }
}

/// The URL with any password replaced, for messages.
pub(crate) fn redact(url: &str) -> String {
    let url = &redact_query_password(url);
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &userinfo[..c], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// `sentinel_password=...` in the query, replaced.
fn redact_query_password(url: &str) -> String {
    let Some((head, query)) = url.split_once('?') else { return url.to_owned() };
    let pairs: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some(("sentinel_password", _)) => "sentinel_password=***".to_owned(),
            _ => p.to_owned(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

pub(crate) fn parse(url: &str) -> Result<Endpoint> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad(url, "expected redis://, rediss://, zk:// or zks://"));
    };
    match scheme {
        "redis+sentinel" => return parse_sentinel(url, false, rest).map(Endpoint::Sentinel),
        "rediss+sentinel" => return parse_sentinel(url, true, rest).map(Endpoint::Sentinel),
        _ => {}
    }
    if let Some(base) = scheme.strip_suffix("+cluster") {
        return parse_cluster(url, base, rest);
    }
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    if rest.contains('#') || query.is_some_and(|q| q.contains('#')) {
        return Err(bad(url, "URL fragments are not supported"));
    }
    let mut ca = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("ca", v)) if !v.is_empty() => ca = Some(v.to_owned()),
            _ => return Err(bad(url, format!("unknown query parameter {pair:?} (only ca=PATH is accepted)"))),
        }
    }
    let (userinfo, hostpart) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, path) = match hostpart.find('/') {
        Some(i) => (&hostpart[..i], Some(&hostpart[i..])),
        None => (hostpart, None),
    };
    if hosts.is_empty() {
        return Err(bad(url, "missing host"));
    }
    match scheme {
        "redis" | "rediss" => {
            if hosts.contains(',') {
                return Err(bad(url, "a Redis URL names one host"));
            }
            let addr = check_host_port(url, hosts, 6379)?;
            if let Some(p) = path {
                let db = p.trim_start_matches('/');
                if !db.is_empty() && db.parse::<u16>().is_err() {
                    return Err(bad(url, format!("database {db:?} is not a number")));
                }
            }
            if ca.is_some() && scheme == "redis" {
                return Err(bad(url, "ca= needs rediss://"));
            }
            let base = match userinfo {
                Some(u) => format!("{scheme}://{u}@{hosts}{}", path.unwrap_or("")),
                None => format!("{scheme}://{hosts}{}", path.unwrap_or("")),
            };
            Ok(Endpoint::Redis { url: base, tls: scheme == "rediss", ca, addr })
        }
        "zk" | "zks" => {
            let tls = scheme == "zks";
            let mut out = Vec::new();
            for h in hosts.split(',') {
                if h.is_empty() {
                    return Err(bad(url, "empty host in the host list"));
                }
                let hp = check_host_port(url, h, 2181)?;
                out.push(if tls { format!("tcp+tls://{hp}") } else { hp });
            }
            if let Some(p) = path {
                if p.len() > 1 && (p.ends_with('/') || p.contains("//")) {
                    return Err(bad(url, format!("chroot {p:?} is not a valid ZooKeeper path")));
                }
            }
            let auth = match userinfo {
                Some(u) => match u.split_once(':') {
                    Some((user, pass)) if !user.is_empty() => Some((user.to_owned(), pass.to_owned())),
                    _ => return Err(bad(url, "ZooKeeper digest auth needs user:password")),
                },
                None => None,
            };
            if ca.is_some() && !tls {
                return Err(bad(url, "ca= needs zks://"));
            }
            let chroot = path.filter(|p| *p != "/").unwrap_or("");
            Ok(Endpoint::Zk { connect: format!("{}{chroot}", out.join(",")), auth, tls, ca, addr: hosts.to_owned() })
        }
        other => Err(bad(
            url,
            format!("unknown scheme {other:?}; expected redis, rediss, redis+sentinel, rediss+sentinel, zk or zks"),
        )),
    }
}

/// `rest`: what follows `redis+sentinel://` (or `rediss+sentinel://`, `tls`).
fn parse_sentinel(url: &str, tls: bool, rest: &str) -> Result<SentinelEndpoint> {
    if rest.contains("://") {
        return Err(bad(url, "mixed schemes: a Sentinel URL lists host:port pairs after one scheme"));
    }
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    if rest.contains('#') || query.is_some_and(|q| q.contains('#')) {
        return Err(bad(url, "URL fragments are not supported"));
    }
    let (userinfo, hostpart) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, master) = match hostpart.split_once('/') {
        Some((h, m)) => (h, m),
        None => (hostpart, ""),
    };
    if hosts.is_empty() {
        return Err(bad(url, "missing host"));
    }
    if master.is_empty() {
        return Err(bad(url, "missing master name: redis+sentinel://host:port[,host:port...]/<master name>"));
    }
    if master.contains('/') || master.chars().any(char::is_whitespace) {
        return Err(bad(url, format!("master name {master:?} is malformed")));
    }
    let mut sentinels = Vec::new();
    for h in hosts.split(',') {
        if h.is_empty() {
            return Err(bad(url, "empty host in the host list"));
        }
        sentinels.push(check_host_port(url, h, 26379)?);
    }
    let mut ep = SentinelEndpoint {
        sentinels,
        master: master.to_owned(),
        tls,
        ca: None,
        userinfo: userinfo.filter(|u| !u.is_empty()).map(str::to_owned),
        db: None,
        sentinel_userinfo: None,
        replicas: ReplicasAsked::OneIfAny,
    };
    let (mut s_user, mut s_pass) = (None, None);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("ca", v)) if !v.is_empty() => ep.ca = Some(v.to_owned()),
            Some(("db", v)) => {
                ep.db = Some(v.parse().map_err(|_| bad(url, format!("database {v:?} is not a number")))?);
            }
            Some(("sentinel_user", v)) if !v.is_empty() => s_user = Some(v),
            Some(("sentinel_password", v)) if !v.is_empty() => s_pass = Some(v),
            Some(("replicas", "all")) => ep.replicas = ReplicasAsked::All,
            Some(("replicas", v)) => {
                let k = v.parse::<u32>().map_err(|_| bad(url, format!("replicas {v:?} is not a count or \"all\"")))?;
                ep.replicas = ReplicasAsked::Exactly(k);
            }
            _ => {
                return Err(bad(
                    url,
                    format!(
                        "unknown query parameter {pair:?} (accepted: db, sentinel_user, sentinel_password, \
                         replicas, ca)"
                    ),
                ))
            }
        }
    }
    ep.sentinel_userinfo = match (s_user, s_pass) {
        (Some(u), Some(p)) => Some(format!("{u}:{p}")),
        (None, Some(p)) => Some(format!(":{p}")),
        (Some(u), None) => Some(u.to_owned()),
        (None, None) => None,
    };
    if ep.ca.is_some() && !tls {
        return Err(bad(url, "ca= needs rediss+sentinel://"));
    }
    Ok(ep)
}

/// The replicas a `replicas=K` may ask for: more than any cluster has.
const MAX_REPLICAS: u32 = 64;

/// `redis+cluster://` and `rediss+cluster://` (`base` is the scheme before `+cluster`).
fn parse_cluster(url: &str, base: &str, rest: &str) -> Result<Endpoint> {
    if base != "redis" && base != "rediss" {
        return Err(bad(url, format!("unknown scheme {base:?}+cluster; expected redis+cluster or rediss+cluster")));
    }
    let tls = base == "rediss";
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    if rest.contains('#') || query.is_some_and(|q| q.contains('#')) {
        return Err(bad(url, "URL fragments are not supported"));
    }
    let (mut ca, mut replicas) = (None, 0);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("ca", v)) if !v.is_empty() => ca = Some(v.to_owned()),
            // One count for every master of the cluster, each with replicas
            // of its own that no one here counts: "all" would be a count per
            // slot, which one lock table's config cannot follow.
            Some(("replicas", "all")) => {
                return Err(bad(
                    url,
                    "replicas=all is for redis+sentinel:// only; on a cluster give a count (replicas=K)",
                ))
            }
            Some(("replicas", v)) => {
                replicas = v
                    .parse()
                    .ok()
                    .filter(|k| *k <= MAX_REPLICAS)
                    .ok_or_else(|| bad(url, format!("replicas={v:?} is not a number from 0 to {MAX_REPLICAS}")))?
            }
            _ => {
                return Err(bad(
                    url,
                    format!("unknown query parameter {pair:?} (only ca=PATH and replicas=K are accepted)"),
                ))
            }
        }
    }
    if ca.is_some() && !tls {
        return Err(bad(url, "ca= needs rediss+cluster://"));
    }
    let (userinfo, hosts) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    if hosts.contains("://") {
        return Err(bad(url, "one scheme for the whole URL: list the nodes as host:port,host:port"));
    }
    if hosts.contains('/') {
        return Err(bad(url, "a Redis Cluster has no databases: nothing may follow the host list"));
    }
    if hosts.is_empty() {
        return Err(bad(url, "missing host"));
    }
    let mut nodes = Vec::new();
    for h in hosts.split(',') {
        if h.is_empty() {
            return Err(bad(url, "empty host in the host list"));
        }
        let hp = check_host_port(url, h, 6379)?;
        nodes.push(match userinfo {
            Some(u) => format!("{base}://{u}@{hp}"),
            None => format!("{base}://{hp}"),
        });
    }
    Ok(Endpoint::RedisCluster(ClusterUrl { nodes, tls, ca, replicas, addr: hosts.to_owned() }))
}

fn check_host_port(url: &str, hp: &str, default_port: u16) -> Result<String> {
    let (host, port) = match hp.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            let port: u16 = p.parse().map_err(|_| bad(url, format!("port {p:?} is not a number from 1 to 65535")))?;
            if port == 0 {
                return Err(bad(url, "port 0 is not allowed"));
            }
            (h, port)
        }
        _ => (hp, default_port),
    };
    if host.is_empty() {
        return Err(bad(url, "missing host"));
    }
    if host.chars().any(|c| c.is_whitespace() || c == '/' || c == '@') {
        return Err(bad(url, format!("host {host:?} is malformed")));
    }
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert!(matches!(parse("redis://127.0.0.1:6379").unwrap(), Endpoint::Redis { tls: false, .. }));
        assert!(matches!(parse("rediss://u:p@h:6380/2").unwrap(), Endpoint::Redis { tls: true, .. }));
        match parse("zk://a:1,b:2/chroot").unwrap() {
            Endpoint::Zk { connect, auth: None, .. } => assert_eq!(connect, "a:1,b:2/chroot"),
            e => panic!("{e:?}"),
        }
        match parse("zks://u:p@a:1?ca=/tmp/ca.pem").unwrap() {
            Endpoint::Zk { connect, auth: Some((u, p)), tls: true, ca: Some(ca), .. } => {
                assert_eq!(connect, "tcp+tls://a:1");
                assert_eq!((u.as_str(), p.as_str(), ca.as_str()), ("u", "p", "/tmp/ca.pem"));
            }
            e => panic!("{e:?}"),
        }
        assert!(matches!(parse("zk://h").unwrap(), Endpoint::Zk { ref connect, .. } if connect == "h:2181"));
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        for (u, why) in [
            ("", "expected redis://"),
            ("127.0.0.1:6379", "expected redis://"),
            ("http://h", "unknown scheme"),
            ("redis://", "missing host"),
            ("redis://h:notaport", "not a number"),
            ("redis://h:0", "port 0"),
            ("redis://h:1/x", "database"),
            ("zk://a:1,,b:2", "empty host"),
            ("zk://a:1/chroot/", "chroot"),
            ("zk://user@a:1", "user:password"),
            ("redis://h?timeout=1", "unknown query"),
            ("redis://h:1#insecure", "fragments"),
            ("redis+cluster://", "missing host"),
            ("redis+cluster://a:1,,b:2", "empty host"),
            ("redis+cluster://a:1,b:70000", "from 1 to 65535"),
            ("redis+cluster://a:1,b:0", "port 0"),
            ("redis+cluster://a:1,redis://b:2", "one scheme"),
            ("redis+cluster://a:1/0", "no databases"),
            ("redis+cluster://a:1?replicas=x", "replicas="),
            ("redis+cluster://a:1?replicas=-1", "replicas="),
            ("redis+cluster://a:1?db=2", "unknown query"),
            ("redis+cluster://a:1?ca=/tmp/ca.pem", "ca= needs rediss+cluster"),
            ("zk+cluster://a:1", "unknown scheme"),
            ("redis+cluster://a:1#x", "fragments"),
        ] {
            match parse(u) {
                Err(Error::InvalidUrl { reason, .. }) => assert!(reason.contains(why), "{u}: {reason}"),
                other => panic!("{u}: {other:?}"),
            }
        }
    }

    #[test]
    fn parses_sentinel_urls() {
        match parse("redis+sentinel://u:p@a:26379,b:26380/mymaster?db=2&sentinel_password=sp&replicas=1").unwrap() {
            Endpoint::Sentinel(ep) => {
                assert_eq!(ep.sentinels, ["a:26379", "b:26380"]);
                assert_eq!(
                    (ep.master.as_str(), ep.db, ep.replicas, ep.tls),
                    ("mymaster", Some(2), ReplicasAsked::Exactly(1), false)
                );
                assert_eq!(ep.sentinel_url("a:26379"), "redis://:sp@a:26379");
                assert_eq!(ep.data_url("10.0.0.1", 6379), "redis://u:p@10.0.0.1:6379/2");
                assert_eq!(ep.data_url("::1", 6379), "redis://u:p@[::1]:6379/2");
            }
            e => panic!("{e:?}"),
        }
        match parse("rediss+sentinel://h/m?ca=/tmp/ca.pem&sentinel_user=su&sentinel_password=sp").unwrap() {
            Endpoint::Sentinel(ep) => {
                assert_eq!(ep.sentinels, ["h:26379"]);
                assert_eq!(
                    (ep.tls, ep.ca.as_deref(), ep.replicas),
                    (true, Some("/tmp/ca.pem"), ReplicasAsked::OneIfAny)
                );
                assert_eq!(ep.sentinel_url("h:26379"), "rediss://su:sp@h:26379");
                assert_eq!(ep.data_url("h", 1), "rediss://h:1/0");
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn replicas_all_asks_every_replica_on_sentinel() {
        match parse("redis+sentinel://a:26379/m?replicas=all").unwrap() {
            Endpoint::Sentinel(ep) => assert_eq!(ep.replicas, ReplicasAsked::All),
            e => panic!("{e:?}"),
        }
        match parse("redis+sentinel://a:26379/m?replicas=0").unwrap() {
            Endpoint::Sentinel(ep) => assert_eq!(ep.replicas, ReplicasAsked::Exactly(0)),
            e => panic!("{e:?}"),
        }
        for (u, why) in [
            ("redis+sentinel://a:1/m?replicas=ALL", "not a count or \"all\""),
            ("redis+sentinel://a:1/m?replicas=", "not a count or \"all\""),
            ("redis+cluster://a:1?replicas=all", "replicas=all is for redis+sentinel:// only"),
        ] {
            match parse(u) {
                Err(Error::InvalidUrl { reason, .. }) => assert!(reason.contains(why), "{u}: {reason}"),
                other => panic!("{u}: {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_sentinel_urls_say_what_is_wrong() {
        for (u, why) in [
            ("redis+sentinel://a:1,b:2", "missing master name"),
            ("redis+sentinel://a:1,b:2/", "missing master name"),
            ("redis+sentinel:///m", "missing host"),
            ("redis+sentinel://a:1,redis://b:2/m", "mixed schemes"),
            ("redis+sentinel://a:1,rediss+sentinel://b:2/m", "mixed schemes"),
            ("redis+sentinel://a:70000/m", "not a number from 1 to 65535"),
            ("redis+sentinel://a:1,b:x/m", "not a number from 1 to 65535"),
            ("redis+sentinel://a:0/m", "port 0"),
            ("redis+sentinel://a:1,,b:2/m", "empty host"),
            ("redis+sentinel://a:1/m/x", "master name"),
            ("redis+sentinel://a:1/m?db=x", "database"),
            ("redis+sentinel://a:1/m?replicas=-1", "replicas"),
            ("redis+sentinel://a:1/m?timeout=1", "unknown query"),
            ("redis+sentinel://a:1/m?ca=/x.pem", "ca= needs rediss+sentinel"),
            ("redis+sentinl://a:1/m", "redis+sentinel"),
        ] {
            match parse(u) {
                Err(Error::InvalidUrl { reason, .. }) => assert!(reason.contains(why), "{u}: {reason}"),
                other => panic!("{u}: {other:?}"),
            }
        }
    }

    #[test]
    fn sentinel_passwords_are_redacted() {
        let e = parse("redis+sentinel://u:secret@a:x/m?sentinel_password=hidden").unwrap_err();
        assert!(!e.to_string().contains("secret") && !e.to_string().contains("hidden"), "{e}");
    }

    #[test]
    fn parses_the_cluster_forms() {
        match parse("redis+cluster://127.0.0.1:7000,127.0.0.1:7001").unwrap() {
            Endpoint::RedisCluster(c) => {
                assert_eq!(c.nodes, ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]);
                assert_eq!(
                    (c.tls, c.replicas, c.ca, c.addr.as_str()),
                    (false, 0, None, "127.0.0.1:7000,127.0.0.1:7001")
                );
            }
            e => panic!("{e:?}"),
        }
        match parse("rediss+cluster://u:p@a:1,b?replicas=1&ca=/tmp/ca.pem").unwrap() {
            Endpoint::RedisCluster(c) => {
                assert_eq!(c.nodes, ["rediss://u:p@a:1", "rediss://u:p@b:6379"]);
                assert_eq!((c.tls, c.replicas, c.ca.as_deref()), (true, 1, Some("/tmp/ca.pem")));
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:secret@h:1"), "redis://u:***@h:1");
        let e = parse("redis://u:secret@h:x").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
