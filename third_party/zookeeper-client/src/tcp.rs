//! polylock's change to zookeeper-client 0.11.2 (see POLYLOCK.md): every
//! connection, plain or under TLS, is a tokio socket with `TCP_NODELAY`.
//!
//! Upstream connects with `async_net`, whose sockets wait on async-io's
//! reactor thread: each reply woke that thread, which then woke the tokio
//! thread running the session, two wake-ups where one does. And it leaves
//! Nagle's algorithm on, so a request written while an earlier one is
//! unacknowledged (a lock's `getChildren` pipelined behind its `create`)
//! waits in the kernel for that ACK, which comes with the `create`'s reply,
//! after the server's disk write. The session runs on tokio (the `tokio`
//! feature), so its sockets can be tokio's.

use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

/// A connection's socket, with the `futures` I/O traits the session uses.
pub type TcpStream = Compat<tokio::net::TcpStream>;

/// Connects to `host:port`, with Nagle's algorithm off. Needs a tokio runtime.
pub async fn connect(host: &str, port: u16) -> std::io::Result<TcpStream> {
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    Ok(stream.compat())
}
