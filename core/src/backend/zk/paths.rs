//! Where a ZooKeeper lock lives and how its contenders sort (Curator's rules).

use crate::LockName;

/// The lock's parent node; contenders are its children. The name itself
/// if it starts with `/`, else `/` + name.
pub fn lock_path(name: &LockName) -> String {
    crate::name::zk_path_of(name.as_str())
}

/// Curator's lock node marker.
pub const LOCK_MARKER: &str = "lock-";

/// The text a child sorts by: after the last `lock-`, or the whole name.
pub fn sort_key(child: &str) -> &str {
    match child.rfind(LOCK_MARKER) {
        Some(i) => &child[i + LOCK_MARKER.len()..],
        None => child,
    }
}

/// Children in lock order (a stable sort, as Java's `Collections.sort`).
pub fn sorted_contenders(mut children: Vec<String>) -> Vec<String> {
    children.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
    children
}

/// The prefix of our node's name for a given protection uuid.
pub fn node_prefix(uuid: &str) -> String {
    format!("_c_{uuid}-{LOCK_MARKER}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_curator() {
        let kids = vec![
            "_c_b-lock-0000000003".to_owned(),
            "_c_a-lock-0000000010".to_owned(),
            "_c_c-lock-0000000001".to_owned(),
        ];
        let sorted = sorted_contenders(kids);
        assert_eq!(sorted[0], "_c_c-lock-0000000001");
        assert_eq!(sorted[2], "_c_a-lock-0000000010");
        assert_eq!(sort_key("no-marker"), "no-marker");
        assert_eq!(sort_key("x-lock-lock-0001"), "0001");
    }

    #[test]
    fn a_name_without_a_slash_is_under_the_root() {
        assert_eq!(lock_path(&LockName::new("orders/42").unwrap()), "/orders/42");
        assert_eq!(lock_path(&LockName::new("/locks/orders-42").unwrap()), "/locks/orders-42");
    }
}
