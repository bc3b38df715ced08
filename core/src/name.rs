//! Lock names: validated once, for every backend. One name means the same
//! lock from every language; each backend maps it
//! ([`crate::redis::RedisKeys`]: the key is the name, Redisson's
//! `getLock(name)` layout; [`crate::zk::lock_path`]: the name with a leading
//! `/`, so `client.lock("/locks/orders-42")` meets Curator's
//! `InterProcessMutex(client, "/locks/orders-42")`).

use crate::Error;

/// Longest accepted name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// A validated lock name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockName {
    name: String,
}

impl LockName {
    /// Validates `name`. Rules (each failure is [`Error::InvalidName`] saying which):
    /// - 1 to 1024 bytes;
    /// - no NUL and no control characters (ZooKeeper refuses them in paths);
    /// - as a ZooKeeper path: no empty segment (`a//b`), no trailing `/`,
    ///   no `.` or `..` segment, not `/` alone and not under `/zookeeper`.
    pub fn new(name: &str) -> Result<Self, Error> {
        if name.is_empty() {
            return Err(Error::InvalidName("the name is empty".into()));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidName(format!(
                "the name is {} bytes long; the limit is {MAX_NAME_LEN}",
                name.len()
            )));
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(Error::InvalidName(format!("the name contains the control character U+{:04X}", c as u32)));
        }
        let path = zk_path_of(name);
        if path == "/" {
            return Err(Error::InvalidName("the name is only '/'".into()));
        }
        if path.ends_with('/') {
            return Err(Error::InvalidName("the name ends with '/'".into()));
        }
        for segment in path[1..].split('/') {
            match segment {
                "" => return Err(Error::InvalidName("the name has an empty path segment ('//')".into())),
                "." | ".." => return Err(Error::InvalidName(format!("the name has a '{segment}' path segment"))),
                _ => {}
            }
        }
        if path == "/zookeeper" || path.starts_with("/zookeeper/") {
            return Err(Error::InvalidName("'/zookeeper' is reserved by ZooKeeper".into()));
        }
        Ok(LockName { name: name.to_owned() })
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

/// ZooKeeper: the lock's parent node (the name, with a leading `/` added
/// when it has none); validation checks the name as this path.
pub(crate) fn zk_path_of(name: &str) -> String {
    if name.starts_with('/') {
        name.to_owned()
    } else {
        format!("/{name}")
    }
}

impl std::fmt::Display for LockName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_path_names() {
        assert_eq!(LockName::new("orders/42").unwrap().as_str(), "orders/42");
        assert_eq!(LockName::new("/locks/orders-42").unwrap().as_str(), "/locks/orders-42");
    }

    #[test]
    fn rejects_bad_names_with_a_reason() {
        let long = "x".repeat(MAX_NAME_LEN + 1);
        for (bad, why) in [
            ("", "empty"),
            ("a\0b", "U+0000"),
            ("a\nb", "U+000A"),
            (long.as_str(), "limit is 1024"),
            ("/", "only '/'"),
            ("a/", "ends with"),
            ("a//b", "empty path segment"),
            ("/a/../b", "'..'"),
            ("zookeeper/x", "reserved"),
        ] {
            match LockName::new(bad) {
                Err(Error::InvalidName(msg)) => assert!(msg.contains(why), "{bad:?}: {msg}"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        assert!(LockName::new(&"x".repeat(MAX_NAME_LEN)).is_ok());
    }
}
