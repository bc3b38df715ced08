//! `LockTable`: every lock of one client (one Redis connection pair or one
//! ZooKeeper session) as one sans-IO endpoint, in the role of quinn-proto's
//! `Endpoint`. It owns a [`LockMachine`] per lock name, made on first use
//! and dropped once idle; allocates the request ids, tickets and release
//! ids of all of them; routes every reply, pub/sub message and fired watch
//! to the machine that asked for it; tells every machine of a connection
//! change; runs status reads; and keeps one timer for all of them.
//!
//! See the crate docs, "The drive contract", for how a driver runs it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use crate::io::{Command, ConnectionEvent, Event, Notification, Op, RedisOp, ReleaseProgress, Reply, ZkOp};
use crate::machine::{AcquireOptions, LockMachine};
use crate::status::{LockStatus, StatusRead, StatusStep};
use crate::{
    holder_id, Backend, Error, FencingToken, Instant, LockConfig, LockMode, LockName, LossReason, Nonce, OwnerId,
    ReleaseId, RequestId, Ticket,
};

/// Names one status read of a table ([`LockTable::read_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatusId(pub u64);

/// What the table asks of its driver, one at a time from
/// [`LockTable::poll_output`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Output {
    /// Deliver to the application: `event` of the lock `name` in `mode`.
    Event {
        /// The lock's name.
        name: LockName,
        /// Which lock of the name (mutex, read or write half, semaphore).
        mode: LockMode,
        /// What happened.
        event: Event,
    },
    /// The answer to the status read `id`.
    Status {
        /// The status read answered.
        id: StatusId,
        /// The lock's status, or why it could not be read.
        result: Result<LockStatus, Error>,
    },
    /// Send this, in order after the commands polled before it, and later
    /// feed back exactly one reply with the same id.
    Command(Command),
    /// Call [`LockTable::handle_timeout`] at this instant. It replaces any
    /// instant announced before: the driver keeps one timer.
    Timeout(Instant),
}

/// Which machine of the table: a name in one mode. A mutex and the write
/// half of a read-write lock have one machine per name; the read half and
/// a semaphore have one per name and owner, since readers (permit holders)
/// of one client hold at once and each owner has its own server record
/// (Redisson's field or permit ids, Curator's node or leases).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    name: String,
    mode: LockMode,
    reader: Option<OwnerId>,
}

impl Key {
    fn new(name: &str, mode: LockMode, owner: OwnerId) -> Self {
        Key { name: name.to_owned(), mode, reader: mode.is_per_owner().then_some(owner) }
    }
}

/// Where the reply to a request goes.
#[derive(Debug)]
enum Route {
    /// To the machine of this lock, as its own request id.
    Lock {
        key: Key,
        local: RequestId,
    },
    Status(StatusId),
}

#[derive(Debug)]
struct Entry {
    machine: LockMachine,
    /// The deadline of this machine in `timers`, if any.
    armed: Option<Instant>,
}

/// Every lock of one client. See the module docs.
#[derive(Debug)]
pub struct LockTable {
    /// The template of new machines (backend, default lease, session timeout).
    config: LockConfig,
    client_id: Nonce,
    locks: HashMap<Key, Entry>,
    next_request: u64,
    next_ticket: u64,
    next_release: u64,
    next_status: u64,
    /// Which machine each pending acquire is in (a cancel names only the ticket).
    tickets: HashMap<Ticket, Key>,
    routes: HashMap<RequestId, Route>,
    /// Live ZooKeeper watches: the table's id of the command that set each,
    /// and the machine's own id of it (a fired watch is reported with it).
    watches: HashMap<RequestId, (Key, RequestId)>,
    watch_ids: HashMap<(Key, RequestId), RequestId>,
    /// Redis: each subscribed channel's locks, and how many of each one's
    /// claims listen with `SUBSCRIBE` and with `SSUBSCRIBE` (index 0 and 1:
    /// separate worlds on the server, counted apart). Redisson's channel is shared: by a lock's claims,
    /// and by names Redisson's naming rule maps to one channel (`abc` and
    /// `{abc}`). The server keeps one subscription per connection, so only
    /// the first subscribe and the last unsubscribe of each go out.
    channels: HashMap<String, HashMap<Key, [u32; 2]>>,
    statuses: HashMap<StatusId, StatusRead>,
    /// Every machine's next deadline.
    timers: BTreeSet<(Instant, Key)>,
    /// The instant last given as [`Output::Timeout`], until it is handled.
    announced: Option<Instant>,
    events: VecDeque<Output>,
    commands: VecDeque<Command>,
    /// Since when the connection has been down, as the driver last said. A
    /// machine made meanwhile (a first use, or again after an idle drop)
    /// hears it, so its claims count from the disconnection as an older
    /// machine's do.
    down_since: Option<Instant>,
    closed: bool,
}

impl LockTable {
    /// A table for one client. `config` is the template of every lock's
    /// machine; `client_id` the client's 128-bit random id (see [`holder_id`]).
    pub fn new(config: LockConfig, client_id: Nonce) -> Result<Self, Error> {
        config.validate()?;
        Ok(LockTable {
            config,
            client_id,
            locks: HashMap::new(),
            next_request: 0,
            next_ticket: 0,
            next_release: 0,
            next_status: 0,
            tickets: HashMap::new(),
            routes: HashMap::new(),
            watches: HashMap::new(),
            watch_ids: HashMap::new(),
            channels: HashMap::new(),
            statuses: HashMap::new(),
            timers: BTreeSet::new(),
            announced: None,
            events: VecDeque::new(),
            commands: VecDeque::new(),
            down_since: None,
            closed: false,
        })
    }

    /// The protocol the table's machines speak.
    pub fn backend(&self) -> Backend {
        self.config.backend
    }

    /// The client's id, as in its [`holder_id`]s.
    pub fn client_id(&self) -> Nonce {
        self.client_id
    }

    /// How `owner`'s grants are recorded on the server.
    pub fn holder_id(&self, owner: OwnerId) -> String {
        holder_id(self.client_id, owner)
    }

    /// ZooKeeper: the session timeout a new session negotiated. Locks made
    /// from now on use it; a machine keeps the timeout its claims started with.
    pub fn set_session_timeout(&mut self, timeout: Duration) {
        self.config.session_timeout = timeout;
    }

    /// Redis: the master now lists `replicas` replicas (see
    /// [`LockConfig::see_replicas`]). Every lock asks the new count from its
    /// next grant or renewal on, the locks already held or queued too: a
    /// holder granted while the master had one replica must not go on
    /// renewing with one acknowledgement once it has two (the other could
    /// be promoted with an older expiry). A reply is read by the count its
    /// own request asked.
    pub fn set_replicas_seen(&mut self, replicas: usize) {
        self.config.see_replicas(replicas);
        for entry in self.locks.values_mut() {
            entry.machine.see_replicas(replicas);
        }
    }

    // ---- queries ---------------------------------------------------------

    /// `owner`'s current grant of `name` in `mode`: its hold count and fencing token.
    pub fn hold(&self, name: &str, mode: LockMode, owner: OwnerId) -> Option<(u32, FencingToken)> {
        let (o, count, token) = self.locks.get(&Key::new(name, mode, owner))?.machine.holder()?;
        (o == owner).then_some((count, token))
    }

    /// Is `name` held in `mode` by anyone of this client? (The read half:
    /// by any reader.)
    pub fn is_held_here(&self, name: &str, mode: LockMode) -> bool {
        self.locks.iter().any(|(k, e)| k.name == name && k.mode == mode && e.machine.holder().is_some())
    }

    /// Why `owner`'s newest lost, not yet released grant of `name` in `mode` was lost.
    pub fn unreleased_loss(&self, name: &str, mode: LockMode, owner: OwnerId) -> Option<LossReason> {
        self.locks.get(&Key::new(name, mode, owner))?.machine.unreleased_loss(owner)
    }

    /// True while anything is on its way to or from the server (a claim
    /// contending, held or cleaning up; a status read) or output is pending.
    /// Closed machines whose holders have not released yet stay, so those
    /// releases report `Lost(Closed)`, but have no server work.
    pub fn has_server_work(&self) -> bool {
        !self.statuses.is_empty()
            || !self.events.is_empty()
            || !self.commands.is_empty()
            || self.locks.values().any(|e| e.machine.has_server_work())
    }

    /// Has [`Self::close`] been called?
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Machines alive (a test and metrics figure: idle ones are dropped).
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }

    // ---- application inputs ---------------------------------------------

    /// Asks for `name` in `mode` on behalf of `owner` (see
    /// [`LockMachine::acquire`]). The outcome comes as an [`Event::Granted`]
    /// or [`Event::Failed`] with the returned ticket, unique in this table.
    ///
    /// Read-write locks: a write acquire by an owner that holds (or waits
    /// for) the read half is refused at once with [`Error::UpgradeRefused`];
    /// a read acquire by the writer is a downgrade, granted beside its write hold.
    pub fn acquire(
        &mut self,
        now: Instant,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        opts: AcquireOptions,
        nonce: Nonce,
    ) -> Result<Ticket, Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        let key = Key::new(name.as_str(), mode, owner);
        if mode == LockMode::Write {
            let reader = Key::new(name.as_str(), LockMode::Read, owner);
            if self.locks.get(&reader).is_some_and(|e| e.machine.holder().is_some() || e.machine.waiting() > 0) {
                return Err(Error::UpgradeRefused);
            }
        }
        // A downgrade: the read claim starts beside the owner's write hold
        // (ZooKeeper names its read node after the writer's, as Curator does).
        let beside_write = match mode {
            LockMode::Read => {
                let writer = Key::new(name.as_str(), LockMode::Write, owner);
                self.locks.get(&writer).and_then(|e| e.machine.write_hold(owner))
            }
            _ => None,
        };
        if !self.locks.contains_key(&key) {
            let mut machine = LockMachine::with_mode(self.config.clone(), name.clone(), mode, self.client_id)?;
            if let Some(down) = self.down_since {
                // A fresh machine has nothing to say about it: no output.
                machine.handle_connection(down, ConnectionEvent::Disconnected);
            }
            self.locks.insert(key.clone(), Entry { machine, armed: None });
        }
        let ticket = Ticket(self.next_ticket + 1);
        let entry = self.locks.get_mut(&key).expect("inserted above");
        let result = entry.machine.acquire_as(ticket, now, owner, opts, nonce, beside_write);
        if result.is_ok() {
            self.next_ticket += 1;
            // Until its Granted or Failed event comes out (see `collect`).
            self.tickets.insert(ticket, key.clone());
        }
        self.collect(&key);
        result.map(|()| ticket)
    }

    /// Withdraws the pending acquire `ticket`; whatever it put on the
    /// server is removed in the background and no event follows. False if
    /// it is not waiting (already granted or failed).
    pub fn cancel(&mut self, now: Instant, ticket: Ticket) -> bool {
        let Some(key) = self.tickets.remove(&ticket) else { return false };
        let Some(entry) = self.locks.get_mut(&key) else { return false };
        let cancelled = entry.machine.cancel(now, ticket);
        self.collect(&key);
        cancelled
    }

    /// Withdraws the pending acquire `ticket` (see
    /// [`LockMachine::withdraw`]): its outcome still comes, an
    /// [`Event::Failed`] with [`Error::Cancelled`] once the server holds
    /// nothing of it, or the grant that came first. False if it is not
    /// waiting (its outcome was already reported).
    pub fn withdraw(&mut self, now: Instant, ticket: Ticket) -> bool {
        let Some(key) = self.tickets.get(&ticket).cloned() else { return false };
        let Some(entry) = self.locks.get_mut(&key) else { return false };
        let withdrawn = entry.machine.withdraw(now, ticket);
        self.collect(&key);
        withdrawn
    }

    /// Ends one hold of `owner`'s grant of `name` in `mode` (of the grant
    /// with fencing token `token`, if given: what a guard releases). See
    /// [`LockMachine::release_hold`]; the [`ReleaseId`] is unique in this table.
    pub fn release(
        &mut self,
        now: Instant,
        name: &str,
        mode: LockMode,
        owner: OwnerId,
        token: Option<FencingToken>,
    ) -> Result<ReleaseProgress, Error> {
        let key = Key::new(name, mode, owner);
        let Some(entry) = self.locks.get_mut(&key) else { return Err(Error::NotHeld) };
        let id = ReleaseId(self.next_release + 1);
        let result = entry.machine.release_hold_as(id, now, owner, token);
        if result == Ok(ReleaseProgress::Releasing(id)) {
            self.next_release += 1;
        }
        self.collect(&key);
        result
    }

    /// An [`Event::Granted`] that nobody took (its caller went away between
    /// asking and the grant): the table gives the hold back, so no lock is
    /// left held by nobody.
    pub fn grant_unwanted(&mut self, now: Instant, name: &str, mode: LockMode, owner: OwnerId, token: FencingToken) {
        // NotHeld: the grant was lost or closed meanwhile; nothing to give back.
        let _ = self.release(now, name, mode, owner, Some(token));
    }

    /// Closes every lock: waiters fail with [`Error::Closed`], each holder
    /// is told `Lost(Closed)` before its release is sent. Later acquires fail
    /// with `Closed`; cleanup runs on until [`Self::has_server_work`] is false.
    pub fn close(&mut self, now: Instant) {
        self.closed = true;
        for key in self.lock_keys() {
            if let Some(e) = self.locks.get_mut(&key) {
                e.machine.close(now);
            }
            self.collect(&key);
        }
    }

    /// Reads who holds `name` on the server, beside any machine. The
    /// answer comes as [`Output::Status`] with the returned id.
    pub fn read_status(&mut self, name: &LockName) -> StatusId {
        self.next_status += 1;
        let id = StatusId(self.next_status);
        let (read, op) = match self.config.backend {
            Backend::Redis => {
                let keys = crate::redis::RedisKeys::of(name);
                let rw = crate::redis::RedisKeys::of_read_write(name);
                let sem = crate::redis::RedisKeys::of_semaphore(name);
                let (r, op) = crate::redis::status::RedisStatusRead::start(&keys, &rw, &sem, self.config.cluster);
                (StatusRead::Redis(r), op)
            }
            Backend::ZooKeeper => {
                let (z, op) = crate::zk::status::ZkStatusRead::start(&crate::zk::lock_path(name));
                (StatusRead::ZooKeeper(z), op)
            }
        };
        self.statuses.insert(id, read);
        self.send(Route::Status(id), op);
        id
    }

    // ---- inputs from the driver -----------------------------------------

    /// The reply to command `id`. Replies nobody waits for any more are dropped.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        match self.routes.remove(&id) {
            Some(Route::Lock { key, local }) => {
                if let Some((watched, local_watch)) = self.watches.get(&id).cloned() {
                    // A stat's watch is set with its `Stat`, a children
                    // watch with its `Children`; any other answer set none.
                    if !matches!(reply, Reply::Stat { .. } | Reply::Children(_)) {
                        // The watch was not set: nothing will fire for it.
                        self.watches.remove(&id);
                        self.watch_ids.remove(&(watched, local_watch));
                    }
                }
                if let Some(e) = self.locks.get_mut(&key) {
                    e.machine.handle_reply(now, local, reply);
                    self.collect(&key);
                }
            }
            Some(Route::Status(sid)) => self.status_reply(sid, reply),
            None => {}
        }
    }

    /// The lock and the machine's own id of the watch the table's command
    /// `id` set, which has fired: it is forgotten.
    fn fired_watch(&mut self, id: RequestId) -> Option<(Key, RequestId)> {
        let (key, local) = self.watches.remove(&id)?;
        self.watch_ids.remove(&(key.clone(), local));
        Some((key, local))
    }

    /// A pub/sub message (routed by its channel) or a fired watch (by the
    /// id of the command that set it).
    pub fn handle_notification(&mut self, now: Instant, n: Notification) {
        let (key, n) = match n {
            Notification::Message { channel, payload } => {
                let Some(keys) = self.channels.get(&channel) else { return };
                let mut keys: Vec<Key> = keys.keys().cloned().collect();
                let Some(last) = keys.pop() else { return };
                for key in keys {
                    let n = Notification::Message { channel: channel.clone(), payload: payload.clone() };
                    self.notify(now, &key, n);
                }
                (last, Notification::Message { channel, payload })
            }
            Notification::WatchFired { id } => {
                let Some((key, local)) = self.fired_watch(id) else { return };
                (key, Notification::WatchFired { id: local })
            }
            Notification::NodeDeleted { id } => {
                let Some((key, local)) = self.fired_watch(id) else { return };
                (key, Notification::NodeDeleted { id: local })
            }
        };
        self.notify(now, &key, n);
    }

    fn notify(&mut self, now: Instant, key: &Key, n: Notification) {
        if let Some(e) = self.locks.get_mut(key) {
            e.machine.handle_notification(now, n);
            self.collect(key);
        }
    }

    /// A change of the connection (Redis) or session (ZooKeeper): every lock hears it.
    pub fn handle_connection(&mut self, now: Instant, ev: ConnectionEvent) {
        self.down_since = match ev {
            ConnectionEvent::Disconnected => self.down_since.or(Some(now)),
            ConnectionEvent::Connected => None,
            _ => self.down_since,
        };
        for key in self.lock_keys() {
            if let Some(e) = self.locks.get_mut(&key) {
                e.machine.handle_connection(now, ev);
            }
            self.collect(&key);
        }
    }

    /// Runs every lock's timers due at `now`. Calling it early or twice is
    /// harmless; afterwards the next deadline is announced again.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.announced = None;
        while let Some((at, key)) = self.timers.first().cloned() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            if let Some(e) = self.locks.get_mut(&key) {
                e.armed = None;
                e.machine.handle_timeout(now);
            }
            self.collect(&key);
        }
    }

    // ---- output ----------------------------------------------------------

    /// The next thing for the driver to do: every pending event and status
    /// answer first, then commands in order, then the timer. Drain it to
    /// `None` after every input; an input given before it is drained is
    /// fine (see the crate docs, "The drive contract").
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some(ev) = self.events.pop_front() {
            return Some(ev);
        }
        if let Some(cmd) = self.commands.pop_front() {
            return Some(Output::Command(cmd));
        }
        let next = self.timers.first().map(|(at, _)| *at)?;
        if self.announced.is_some_and(|a| a <= next) {
            return None;
        }
        self.announced = Some(next);
        Some(Output::Timeout(next))
    }

    // ---- internals -------------------------------------------------------

    fn lock_keys(&self) -> Vec<Key> {
        self.locks.keys().cloned().collect()
    }

    /// Moves what machine `key` produced into the table's queues (events
    /// before commands, as the drive contract wants), re-arms its timer,
    /// and drops it if it is idle.
    fn collect(&mut self, key: &Key) {
        let Some(entry) = self.locks.get_mut(key) else { return };
        let mut produced = Vec::new();
        while let Some(event) = entry.machine.poll_event() {
            if let Event::Granted { ticket, .. } | Event::Failed { ticket, .. } = &event {
                self.tickets.remove(ticket);
            }
            self.events.push_back(Output::Event { name: entry.machine.name().clone(), mode: key.mode, event });
        }
        while let Some(cmd) = entry.machine.poll_command() {
            produced.push(cmd);
        }
        let next = entry.machine.poll_timeout();
        let idle = entry.machine.is_idle();
        let armed = std::mem::replace(&mut entry.armed, next);
        if armed != next {
            if let Some(old) = armed {
                self.timers.remove(&(old, key.clone()));
            }
            if let Some(at) = next {
                self.timers.insert((at, key.clone()));
            }
        }
        for cmd in produced {
            self.route_command(key, cmd);
        }
        if idle {
            self.drop_lock(key);
        }
    }

    /// Gives a machine's command a table-wide id and notes what its reply
    /// and any later notification belong to.
    fn route_command(&mut self, key: &Key, cmd: Command) {
        let Command { id: local, op } = cmd;
        let op = match op {
            Op::Redis(RedisOp::Subscribe { channels }) => match self.listen(key, channels, 0) {
                Some(channels) => Op::Redis(RedisOp::Subscribe { channels }),
                None => return,
            },
            Op::Redis(RedisOp::ShardSubscribe { channels }) => match self.listen(key, channels, 1) {
                Some(channels) => Op::Redis(RedisOp::ShardSubscribe { channels }),
                None => return,
            },
            Op::Redis(RedisOp::Unsubscribe { channels }) => match self.stop_listening(key, channels, 0) {
                Some(channels) => Op::Redis(RedisOp::Unsubscribe { channels }),
                None => return,
            },
            Op::Redis(RedisOp::ShardUnsubscribe { channels }) => match self.stop_listening(key, channels, 1) {
                Some(channels) => Op::Redis(RedisOp::ShardUnsubscribe { channels }),
                None => return,
            },
            Op::ZooKeeper(ZkOp::Unwatch { watch }) => {
                let Some(global) = self.watch_ids.remove(&(key.clone(), watch)) else {
                    // Already fired or never set: nothing to drop. No claim
                    // waits for an unwatch's reply, so none is owed.
                    return;
                };
                self.watches.remove(&global);
                Op::ZooKeeper(ZkOp::Unwatch { watch: global })
            }
            op => op,
        };
        let watch = matches!(op, Op::ZooKeeper(ZkOp::Stat { watch: true, .. } | ZkOp::WatchChildren { .. }));
        let id = self.send(Route::Lock { key: key.clone(), local }, op);
        if watch {
            self.watches.insert(id, (key.clone(), local));
            self.watch_ids.insert((key.clone(), local), id);
        }
    }

    /// Counts `key` as a listener of each of `channels` (`kind` as in
    /// [`Self::channels`]) and returns those nobody listened to yet: the
    /// ones to subscribe. `None` when there are none: subscribed (or asked)
    /// already on this connection, and no claim waits for the reply of a
    /// channel it shares.
    fn listen(&mut self, key: &Key, channels: Vec<String>, kind: usize) -> Option<Vec<String>> {
        let mut new = Vec::with_capacity(channels.len());
        for channel in channels {
            let names = self.channels.entry(channel.clone()).or_default();
            let listening: u32 = names.values().map(|n| n[kind]).sum();
            names.entry(key.clone()).or_default()[kind] += 1;
            if listening == 0 {
                new.push(channel);
            }
        }
        (!new.is_empty()).then_some(new)
    }

    /// Counts `key` out as a listener of each of `channels` and returns
    /// those nobody listens to now: the ones to unsubscribe (`None`: another
    /// claim still listens on each).
    fn stop_listening(&mut self, key: &Key, channels: Vec<String>, kind: usize) -> Option<Vec<String>> {
        let mut gone = Vec::with_capacity(channels.len());
        for channel in channels {
            let Some(names) = self.channels.get_mut(&channel) else {
                gone.push(channel);
                continue;
            };
            if let Some(n) = names.get_mut(key) {
                n[kind] = n[kind].saturating_sub(1);
                if *n == [0; 2] {
                    names.remove(key);
                }
            }
            let listening: u32 = names.values().map(|n| n[kind]).sum();
            if names.is_empty() {
                self.channels.remove(&channel);
            }
            if listening == 0 {
                gone.push(channel);
            }
        }
        (!gone.is_empty()).then_some(gone)
    }

    fn send(&mut self, route: Route, op: Op) -> RequestId {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        self.routes.insert(id, route);
        self.commands.push_back(Command { id, op });
        id
    }

    fn drop_lock(&mut self, key: &Key) {
        let Some(entry) = self.locks.remove(key) else { return };
        if let Some(at) = entry.armed {
            self.timers.remove(&(at, key.clone()));
        }
        if !self.channels.is_empty() {
            self.channels.retain(|_, names| {
                names.remove(key);
                !names.is_empty()
            });
        }
        let stale: Vec<RequestId> = self.watches.iter().filter(|(_, (k, _))| k == key).map(|(id, _)| *id).collect();
        for id in stale {
            // Its claims ended without dropping the watch: let the driver drop it.
            if let Some((n, local)) = self.watches.remove(&id) {
                self.watch_ids.remove(&(n, local));
            }
            self.next_request += 1;
            self.commands.push_back(Command {
                id: RequestId(self.next_request),
                op: Op::ZooKeeper(ZkOp::Unwatch { watch: id }),
            });
        }
        if !self.routes.is_empty() {
            self.routes.retain(|_, r| !matches!(r, Route::Lock { key: k, .. } if k == key));
        }
    }

    fn status_reply(&mut self, id: StatusId, reply: Reply) {
        let Some(mut read) = self.statuses.remove(&id) else { return };
        match read.on_reply(reply) {
            StatusStep::Send(op) => {
                self.statuses.insert(id, read);
                self.send(Route::Status(id), op);
            }
            StatusStep::Done(result) => self.events.push_back(Output::Status { id, result }),
        }
    }
}
