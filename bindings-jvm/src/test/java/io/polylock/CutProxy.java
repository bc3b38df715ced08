package io.polylock;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A loopback TCP proxy in front of one real server that can cut the clients behind it off (a
 * partition: their connections close and new ones are refused) while the server stays up for
 * everyone else, as the runtime's own fault proxy does for the Rust tests. A client connected
 * through it that holds a lock stops renewing it, and so is told it lost the lock, while another
 * client waits on the server for it.
 */
final class CutProxy implements AutoCloseable {
    private final ServerSocket listener;
    private final String targetHost;
    private final int targetPort;
    private final Set<Socket> open = ConcurrentHashMap.newKeySet();
    private volatile boolean cut;

    /** Starts forwarding 127.0.0.1:{@link #port()} to the one host:port of {@code url}. */
    CutProxy(String url) throws IOException {
        String hostPort = hostPort(url);
        int colon = hostPort.lastIndexOf(':');
        targetHost = hostPort.substring(0, colon);
        targetPort = Integer.parseInt(hostPort.substring(colon + 1));
        listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        daemon("cut-proxy-accept", this::acceptLoop).start();
    }

    /** {@code url} with its server's host:port replaced by this proxy's. */
    String url(String url) {
        return url.replace(hostPort(url), "127.0.0.1:" + listener.getLocalPort());
    }

    int port() {
        return listener.getLocalPort();
    }

    /** Closes every connection through the proxy and refuses new ones. */
    void cut() {
        cut = true;
        for (Socket s : open) {
            closeQuietly(s);
        }
        open.clear();
    }

    /** Forwards new connections again. */
    void restore() {
        cut = false;
    }

    @Override
    public void close() {
        cut();
        closeQuietly(listener);
    }

    /** The host:port of a one-server URL (after any user:pass@, before any path or query). */
    private static String hostPort(String url) {
        String rest = url.substring(url.indexOf("://") + 3);
        rest = rest.substring(rest.lastIndexOf('@') + 1);
        String hostPort = rest.split("[/?]")[0];
        if (hostPort.contains(",")) {
            throw new IllegalArgumentException("a CutProxy forwards to one server, not " + hostPort);
        }
        return hostPort;
    }

    private void acceptLoop() {
        while (!listener.isClosed()) {
            Socket inbound;
            try {
                inbound = listener.accept();
            } catch (IOException e) {
                return; // closed
            }
            if (cut) {
                closeQuietly(inbound); // refused, as a partition would
                continue;
            }
            Socket outbound;
            try {
                outbound = new Socket(targetHost, targetPort);
            } catch (IOException e) {
                closeQuietly(inbound);
                continue;
            }
            open.add(inbound);
            open.add(outbound);
            if (cut) { // cut() ran between the check above and the adds: it missed these two
                closeQuietly(inbound);
                closeQuietly(outbound);
                continue;
            }
            daemon("cut-proxy-up", () -> pump(inbound, outbound)).start();
            daemon("cut-proxy-down", () -> pump(outbound, inbound)).start();
        }
    }

    /** Copies until either side closes, then closes both. */
    private void pump(Socket from, Socket to) {
        byte[] buf = new byte[8192];
        try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
            int n;
            while ((n = in.read(buf)) >= 0) {
                out.write(buf, 0, n);
                out.flush();
            }
        } catch (IOException e) {
            // closed by cut() or by a peer
        } finally {
            closeQuietly(from);
            closeQuietly(to);
            open.remove(from);
            open.remove(to);
        }
    }

    private static Thread daemon(String name, Runnable body) {
        Thread t = new Thread(body, name);
        t.setDaemon(true);
        return t;
    }

    private static void closeQuietly(AutoCloseable c) {
        try {
            c.close();
        } catch (Exception e) {
            // already closed
        }
    }
}
