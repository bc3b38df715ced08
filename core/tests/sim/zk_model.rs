//! A sans-IO model of a ZooKeeper server, for the simulation only:
//! sessions, persistent/container/ephemeral(-sequential) nodes, czxid,
//! one-shot data and children watches, session expiry and container reaping.

use std::collections::{BTreeMap, HashMap};

use polylock_core::ZkOp;
use polylock_core::{Op, Reply, RequestId};

#[derive(Debug, Clone)]
pub struct Node {
    pub czxid: i64,
    pub ephemeral_session: Option<u64>,
    pub container: bool,
    pub data: Vec<u8>,
    /// Next sequence number for children (restarts if the node is recreated).
    pub next_seq: u64,
}

#[derive(Debug, Default)]
pub struct ZkModel {
    pub nodes: BTreeMap<String, Node>,
    zxid: i64,
    /// path -> (client, watch id)
    watches: HashMap<String, Vec<(usize, RequestId)>>,
    /// Children watches: parent path -> (client, watch id). They fire when
    /// a child is created or deleted, or the parent itself is deleted.
    child_watches: HashMap<String, Vec<(usize, RequestId)>>,
    /// Wake-ups: children watches fired.
    pub child_watches_fired: u64,
    /// Wake-ups: watches fired by a deletion.
    pub watches_fired: u64,
    pub deletes_of_lock_nodes: u64,
}

/// A watch to deliver: (client, watch id).
pub type Fired = Vec<(usize, RequestId)>;

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "/",
    }
}

impl ZkModel {
    pub fn new() -> Self {
        let mut m = ZkModel::default();
        m.nodes.insert(
            "/".into(),
            Node { czxid: 0, ephemeral_session: None, container: false, data: vec![], next_seq: 0 },
        );
        m
    }

    fn children(&self, path: &str) -> Vec<String> {
        let prefix = if path == "/" { "/".to_owned() } else { format!("{path}/") };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains('/'))
            .map(|(k, _)| k[prefix.len()..].to_owned())
            .collect()
    }

    fn delete_node(&mut self, path: &str, fired: &mut Fired) {
        self.nodes.remove(path);
        if let Some(ws) = self.watches.remove(path) {
            self.watches_fired += ws.len() as u64;
            fired.extend(ws);
        }
        self.fire_children(path, fired);
        self.fire_children(parent_of(path), fired);
    }

    /// The children of `parent` changed (or it went): its children watches fire.
    fn fire_children(&mut self, parent: &str, fired: &mut Fired) {
        if let Some(ws) = self.child_watches.remove(parent) {
            self.child_watches_fired += ws.len() as u64;
            fired.extend(ws);
        }
    }

    pub fn apply(&mut self, client: usize, session: u64, id: RequestId, op: &Op, fired: &mut Fired) -> Reply {
        match op {
            Op::ZooKeeper(ZkOp::CreateSequential { path, data }) => {
                let parent = parent_of(path).to_owned();
                let Some(p) = self.nodes.get_mut(&parent) else { return Reply::NoNode };
                let seq = p.next_seq;
                p.next_seq += 1;
                self.zxid += 1;
                let full = format!("{path}{seq:010}");
                self.nodes.insert(
                    full.clone(),
                    Node {
                        czxid: self.zxid,
                        ephemeral_session: Some(session),
                        container: false,
                        data: data.clone(),
                        next_seq: 0,
                    },
                );
                self.fire_children(&parent, fired);
                Reply::Created { path: full, czxid: self.zxid }
            }
            Op::ZooKeeper(ZkOp::CreateEphemeral { path, data }) => {
                let parent = parent_of(path).to_owned();
                if !self.nodes.contains_key(&parent) {
                    return Reply::NoNode;
                }
                if self.nodes.contains_key(path) {
                    return Reply::Done;
                }
                self.zxid += 1;
                let node = Node {
                    czxid: self.zxid,
                    ephemeral_session: Some(session),
                    container: false,
                    data: data.clone(),
                    next_seq: 0,
                };
                self.nodes.insert(path.clone(), node);
                self.fire_children(&parent, fired);
                Reply::Created { path: path.clone(), czxid: self.zxid }
            }
            Op::ZooKeeper(ZkOp::CreatePersistent { path, data }) => {
                let parent = parent_of(path).to_owned();
                if !self.nodes.contains_key(&parent) {
                    return Reply::NoNode;
                }
                if self.nodes.contains_key(path) {
                    return Reply::Done;
                }
                self.zxid += 1;
                let node = Node {
                    czxid: self.zxid,
                    ephemeral_session: None,
                    container: false,
                    data: data.clone(),
                    next_seq: 0,
                };
                self.nodes.insert(path.clone(), node);
                self.fire_children(&parent, fired);
                Reply::Created { path: path.clone(), czxid: self.zxid }
            }
            Op::ZooKeeper(ZkOp::CreateContainers { path }) => {
                let mut at = String::new();
                for seg in path.trim_start_matches('/').split('/') {
                    at.push('/');
                    at.push_str(seg);
                    if !self.nodes.contains_key(&at) {
                        self.zxid += 1;
                        self.nodes.insert(
                            at.clone(),
                            Node {
                                czxid: self.zxid,
                                ephemeral_session: None,
                                container: true,
                                data: vec![],
                                next_seq: 0,
                            },
                        );
                        self.fire_children(parent_of(&at), fired);
                    }
                }
                Reply::Done
            }
            Op::ZooKeeper(ZkOp::GetChildren { path }) => {
                if !self.nodes.contains_key(path) {
                    return Reply::NoNode;
                }
                Reply::Children(self.children(path))
            }
            Op::ZooKeeper(ZkOp::WatchChildren { path }) => {
                if !self.nodes.contains_key(path) {
                    return Reply::NoNode;
                }
                self.child_watches.entry(path.clone()).or_default().push((client, id));
                Reply::Children(self.children(path))
            }
            Op::ZooKeeper(ZkOp::Stat { path, watch }) => match self.nodes.get(path) {
                None => Reply::NoNode,
                Some(n) => {
                    let czxid = n.czxid;
                    if *watch {
                        self.watches.entry(path.clone()).or_default().push((client, id));
                    }
                    Reply::Stat { czxid }
                }
            },
            Op::ZooKeeper(ZkOp::GetData { path }) => match self.nodes.get(path) {
                None => Reply::NoNode,
                Some(n) => Reply::Data { data: n.data.clone(), czxid: n.czxid },
            },
            Op::ZooKeeper(ZkOp::Delete { path }) => {
                if !self.nodes.contains_key(path) {
                    return Reply::NoNode;
                }
                self.zxid += 1;
                self.deletes_of_lock_nodes += 1;
                self.delete_node(path, fired);
                Reply::Done
            }
            Op::ZooKeeper(ZkOp::Unwatch { watch }) => {
                for map in [&mut self.watches, &mut self.child_watches] {
                    for ws in map.values_mut() {
                        ws.retain(|w| *w != (client, *watch));
                    }
                    map.retain(|_, ws| !ws.is_empty());
                }
                Reply::Done
            }
            other => Reply::Refused(format!("not a ZooKeeper op: {other:?}")),
        }
    }

    /// Session expiry: delete its ephemeral nodes, firing watches.
    pub fn expire_session(&mut self, session: u64, fired: &mut Fired) {
        let doomed: Vec<String> =
            self.nodes.iter().filter(|(_, n)| n.ephemeral_session == Some(session)).map(|(k, _)| k.clone()).collect();
        for p in doomed {
            self.zxid += 1;
            self.delete_node(&p, fired);
        }
    }

    /// Container reaping: empty containers disappear (ZooKeeper does this periodically).
    /// A reaped container is deleted as any node is: its watches fire
    /// (data and children watches on it, children watches on its parent),
    /// as a real server's do; a waiter watching the children of a reaped
    /// `leases` node is woken, not left to wait forever.
    pub fn reap_containers(&mut self, fired: &mut Fired) {
        let empty: Vec<String> = self
            .nodes
            .iter()
            .filter(|(k, n)| n.container && self.children(k).is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for p in empty {
            self.zxid += 1;
            self.delete_node(&p, fired);
        }
    }

    /// Watches set and not yet fired or removed.
    pub fn live_watches(&self) -> usize {
        self.watches.values().chain(self.child_watches.values()).map(Vec::len).sum()
    }

    /// The holder by Curator's rule: the owner session of the first child.
    pub fn holder_session(&self, path: &str) -> Option<u64> {
        let kids = polylock_core::zk::sorted_contenders(self.children(path));
        let first = kids.first()?;
        self.nodes.get(&format!("{path}/{first}")).and_then(|n| n.ephemeral_session)
    }

    pub fn czxid_of_session_node(&self, path: &str, session: u64) -> Vec<i64> {
        self.children(path)
            .iter()
            .filter_map(|c| self.nodes.get(&format!("{path}/{c}")))
            .filter(|n| n.ephemeral_session == Some(session))
            .map(|n| n.czxid)
            .collect()
    }

    pub fn ephemeral_count(&self) -> usize {
        self.nodes.values().filter(|n| n.ephemeral_session.is_some()).count()
    }
}
