//! Leader elections against the real servers: one leader at a time, the
//! next participant leads once the leader resigns (or its future is
//! dropped mid-campaign: nothing left behind), terms only grow,
//! `leader()` reports the participant and term as the server records them,
//! and ZooKeeper participants are `LeaderLatch` nodes (`latch-`, the
//! participant id as data).

use crate::support;

use std::time::Duration;

use polylock::Error;
use support::*;

#[tokio::test]
async fn one_leader_at_a_time_and_the_next_leads_after_a_resign() {
    for (backend, url) in backends() {
        let (a, b) = (client(&url).await, client(&url).await);
        let name = unique("election");
        let (ea, eb) = (a.election(&name).unwrap(), b.election(&name).unwrap());
        assert_eq!(ea.leader().await.unwrap(), None, "{backend}: a leader before any campaign");

        let first = ea.campaign().await.unwrap();
        let leader = ea.leader().await.unwrap().expect("a leader after a campaign");
        assert_eq!(leader.participant, first.participant(), "{backend}");
        if backend == "zookeeper" {
            assert_eq!(leader.term, Some(first.term()), "{backend}: the term as the server records it");
            let children = zk_children(&url, &name).await;
            assert!(
                children.len() == 1 && children[0].starts_with("_c_") && children[0].contains("-latch-"),
                "{backend}: not a LeaderLatch node: {children:?}"
            );
        }

        // B campaigns while A leads: it waits.
        assert!(eb.campaign_timeout(Duration::ZERO).await.unwrap().is_none(), "{backend}: two leaders");
        let waiting = tokio::spawn({
            let eb = eb.clone();
            async move { eb.campaign().await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "{backend}: B led while A leads");

        first.resign().await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap_or_else(|_| panic!("{backend}: B did not lead after A resigned"))
            .unwrap()
            .unwrap();
        assert!(second.term() > leader.term.unwrap_or(0), "{backend}: the term did not grow");
        let now = eb.leader().await.unwrap().expect("B leads");
        assert_eq!(now.participant, second.participant(), "{backend}");
        assert_ne!(now.participant, leader.participant, "{backend}");
        second.resign().await.unwrap();
        assert_eq!(eb.leader().await.unwrap(), None, "{backend}: a leader after every resign");
        if backend == "zookeeper" {
            assert!(zk_children(&url, &name).await.is_empty(), "{backend}: nodes left behind");
        } else {
            assert!(redis_leftovers(&url, &name).await.is_empty(), "{backend}: keys left behind");
        }
        a.close().await;
        b.close().await;
    }
}

/// A participant is not re-entrant, but two campaigns of one client are two
/// participants: the second waits for the first to resign.
#[tokio::test]
async fn two_campaigns_of_one_client_are_two_participants() {
    for (backend, url) in backends() {
        let c = client(&url).await;
        let election = c.election(&unique("election-local")).unwrap();
        let first = election.campaign().await.unwrap();
        assert!(
            election.campaign_timeout(Duration::from_millis(200)).await.unwrap().is_none(),
            "{backend}: a second campaign of the same client led beside the first"
        );
        let term = first.term();
        first.resign().await.unwrap();
        let second = election.campaign_timeout(Duration::from_secs(5)).await.unwrap().expect("leads after the resign");
        assert!(second.term() > term, "{backend}");
        assert!(matches!(second.resign().await, Ok(())));
        c.close().await;
    }
}

/// A campaign dropped while it waits leaves nothing on the server, and the
/// leader's resign then leaves the election empty.
#[tokio::test]
async fn a_campaign_dropped_while_waiting_leaves_nothing_behind() {
    for (backend, url) in backends() {
        let (a, b) = (client(&url).await, client(&url).await);
        let name = unique("election-drop");
        let leading = a.election(&name).unwrap().campaign().await.unwrap();
        let eb = b.election(&name).unwrap();
        let gave_up = tokio::time::timeout(Duration::from_millis(300), eb.campaign()).await;
        assert!(gave_up.is_err(), "{backend}: led while another leads");
        leading.resign().await.unwrap();
        let empty = eventually(Duration::from_secs(5), || async {
            if backend == "zookeeper" {
                zk_children(&url, &name).await.is_empty()
            } else {
                redis_leftovers(&url, &name).await.is_empty()
            }
        })
        .await;
        assert!(empty, "{backend}: the dropped campaign left something behind");
        assert_eq!(eb.leader().await.unwrap(), None, "{backend}");
        let closed = a.election(&name).unwrap();
        a.close().await;
        assert!(matches!(closed.campaign().await, Err(Error::Closed)), "{backend}");
        b.close().await;
    }
}

/// A leadership held for several leases still shows its term to
/// `leader()`: on Redis its renewals keep the fence counter with the lock.
#[tokio::test]
async fn leader_reports_the_term_of_a_leadership_held_past_its_lease() {
    for (backend, url) in backends() {
        let c = client(&url).await;
        let opts = polylock::LockOptions { lease: Some(Duration::from_millis(600)), ..Default::default() };
        let election = c.election_with(&unique("election-long"), opts).unwrap();
        let lead = election.campaign().await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(lead.lost_reason().is_none(), "{backend}: lost while held");
        let leader = election.leader().await.unwrap().expect("a leader");
        assert_eq!(leader.term, Some(lead.term()), "{backend}: the term after two and a half leases");
        lead.resign().await.unwrap();
        c.close().await;
    }
}
