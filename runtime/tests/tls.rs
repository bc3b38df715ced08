//! zks:// against a real ZooKeeper that speaks only TLS (Netty, a private
//! CA made here with openssl, the server started here on a free loopback
//! port). The rediss:// counterpart is in locks.rs.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use polylock::{Client, Error};
use support::*;

/// Debian's ZooKeeper 3.8 server; zookeeper.jar's manifest brings the rest
/// of its classpath except an SLF4J binding and Netty's codec, which the
/// TLS (Netty) connection factory needs.
const ZK_CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:\
/usr/share/java/log4j-1.2.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/slf4j-api.jar:\
/usr/share/java/netty-codec.jar";

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sh(script: &str) {
    let ok = Command::new("sh").arg("-c").arg(script).status().unwrap().success();
    assert!(ok, "{script}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zks_with_a_private_ca() {
    let dir = std::env::temp_dir().join(format!("polylock-zktls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let d = dir.to_str().unwrap();
    sh(&format!(
        "cd {d} && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=polylock-test-ca -keyout ca.key -out ca.pem 2>/dev/null \
         && openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr 2>/dev/null \
         && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext \
         && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.pem 2>/dev/null \
         && openssl pkcs12 -export -in server.pem -inkey server.key -out server.p12 -passout pass:polylock \
         && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=some-other-ca -keyout other.key -out other-ca.pem 2>/dev/null"
    ));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::write(
        dir.join("zoo.cfg"),
        format!(
            "tickTime=2000\ndataDir={d}/data\nsecureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={d}/server.p12\nssl.keyStore.password=polylock\nssl.keyStore.type=PKCS12\n\
             ssl.clientAuth=none\nadmin.enableServer=false\n"
        ),
    )
    .unwrap();
    let _server = Server(
        Command::new("java")
            .args(["-Xmx128m", "-cp", ZK_CLASSPATH, "org.apache.zookeeper.server.ZooKeeperServerMain"])
            .arg(dir.join("zoo.cfg"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("java (for the ZooKeeper server)"),
    );
    let url = format!("zks://127.0.0.1:{port}?ca={d}/ca.pem");
    let up = eventually(Duration::from_secs(30), || async { Client::connect(&url).await.is_ok() }).await;
    assert!(up, "the TLS ZooKeeper did not come up");
    let c = client(&url).await;
    let name = unique("zk-tls");
    let g = c.lock(&name).unwrap().acquire().await.unwrap();
    assert!(g.fencing_token() > 0);
    // A second client over TLS is excluded while the first holds.
    let other = client(&url).await;
    assert!(other.lock(&name).unwrap().try_acquire(Duration::from_millis(200)).await.unwrap().is_none());
    g.release().await.unwrap();
    let g2 =
        other.lock(&name).unwrap().try_acquire(Duration::from_secs(5)).await.unwrap().expect("granted after release");
    g2.release().await.unwrap();
    // With another CA the server's certificate is refused, and so is plain TCP to a TLS port.
    let no_ca = Client::connect_with(
        &format!("zks://127.0.0.1:{port}?ca={d}/other-ca.pem"),
        polylock::ClientOptions { connect_timeout: Duration::from_secs(3), ..Default::default() },
    )
    .await;
    assert!(matches!(no_ca, Err(Error::Connect { .. })), "{no_ca:?}");
    let plain = Client::connect_with(
        &format!("zk://127.0.0.1:{port}"),
        polylock::ClientOptions { connect_timeout: Duration::from_secs(3), ..Default::default() },
    )
    .await;
    assert!(plain.is_err(), "plain TCP to a TLS-only port connected");
    c.close().await;
    other.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
