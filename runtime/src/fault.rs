//! Fault injection for tests in every language: a loopback TCP proxy that
//! can cut a client off from its server (a partition) while the server
//! stays up for everyone else. `Client::debug_expire_session` uses it to
//! make ZooKeeper expire a session the way a real partition does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Forwards 127.0.0.1:`port` to a target until cut.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to `target` (`host:port`).
    pub async fn start(target: &str) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let target = target.to_owned();
        let (is_cut, tracked) = (cut.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if is_cut.load(Ordering::SeqCst) {
                    continue; // dropping the socket refuses the connection
                }
                let target = target.clone();
                let h = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tracked.lock().unwrap_or_else(|p| p.into_inner()).push(h);
            }
        });
        Ok(Proxy { port, cut, conns, accept })
    }

    /// The local port clients should connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections through the proxy that neither side has closed.
    pub fn open_connections(&self) -> usize {
        self.conns.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|h| !h.is_finished()).count()
    }

    /// Closes every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for h in self.conns.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            h.abort();
        }
    }

    /// Accepts and forwards new connections again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
