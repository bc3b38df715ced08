//! The settings a caller gives: per client and per lock.

use std::time::Duration;

/// Connection settings. `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// How long `connect` may take before it fails naming the address. Default 5 s.
    pub connect_timeout: Duration,
    /// Redis: how long one command may take before it counts as unanswered. Default 5 s.
    pub request_timeout: Duration,
    /// ZooKeeper: the session timeout asked of the server (it may clamp it). Default 10 s.
    pub session_timeout: Duration,
    /// Redis: the default lease of this client's locks. Default 30 s.
    pub lease: Duration,
    /// Tests only: route a single-host ZooKeeper connection through an
    /// in-process [`crate::fault::Proxy`], so `debug_expire_session` can
    /// partition this client for real. Default false.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub debug_faults: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            session_timeout: Duration::from_secs(10),
            lease: Duration::from_secs(30),
            #[cfg(feature = "test-hooks")]
            debug_faults: false,
        }
    }
}

/// Per-lock settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockOptions {
    /// Redis: this lock's lease (renewed every third of it). `None`: the client's.
    pub lease: Option<Duration>,
    /// Be told of a loss this much earlier than the safety margins alone
    /// would tell: the time the holder needs to stop its work (a command's
    /// exit after SIGTERM, say) before the server can let anyone else in.
    /// Redis: at most a third of the lease; ZooKeeper: less than a third
    /// of the session timeout. Zero by default.
    pub stop_margin: Duration,
}
