use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use super::*;
use crate::host::probe::record::Stage;

fn fleet(n: usize, rails: u32) -> Vec<Peer> {
    (0..n)
        .flat_map(|i| {
            (0..rails).map(move |r| Peer {
                node: format!("node{i:04}"),
                addr: format!("10.{r}.{}.{}", i / 250, i % 250 + 1),
                fabric: format!("roce:10.{r}.0.0/16"),
                rail: Some(r),
            })
        })
        .collect()
}

#[test]
fn every_member_is_probed_by_exactly_k_others_each_round_and_targets_rotate() {
    let peers = fleet(17, 2);
    for round in 0..20u64 {
        let mut probed: HashMap<&Peer, usize> = HashMap::new();
        for me in &peers {
            let picked = pick(me, &peers, 3, false, round);
            assert_eq!(picked.len(), 3, "{me:?}");
            for p in &picked {
                assert_eq!(p.fabric, me.fabric, "another fabric");
                assert_ne!(p.node, me.node, "itself");
                *probed
                    .entry(peers.iter().find(|x| *x == p).unwrap())
                    .or_default() += 1;
            }
        }
        assert!(
            peers.iter().all(|p| probed.get(p) == Some(&3)),
            "round {round}: {probed:?}"
        );
    }
    let me = &peers[0];
    assert_ne!(
        pick(me, &peers, 3, false, 0),
        pick(me, &peers, 3, false, 1),
        "no rotation"
    );
    // Deterministic: the same round picks the same peers, whatever the list's order.
    let mut shuffled = peers.clone();
    shuffled.reverse();
    assert_eq!(
        pick(me, &peers, 3, false, 5),
        pick(me, &shuffled, 3, false, 5)
    );
}

#[test]
fn small_fabrics_same_rail_and_unknown_members() {
    let peers = fleet(2, 1);
    assert_eq!(pick(&peers[0], &peers, 3, false, 0), vec![peers[1].clone()]);
    assert!(
        pick(&peers[0], &peers[..1], 3, false, 0).is_empty(),
        "alone"
    );
    let stranger = Peer {
        node: "x".into(),
        addr: "1.2.3.4".into(),
        fabric: peers[0].fabric.clone(),
        rail: None,
    };
    assert!(
        pick(&stranger, &peers, 3, false, 0).is_empty(),
        "not in the list"
    );
    // One fabric, two rails: same_rail keeps the probes on the member's rail.
    let mut mixed = fleet(6, 1);
    for (i, p) in mixed.iter_mut().enumerate() {
        p.rail = Some((i % 2) as u32);
    }
    for round in 0..5 {
        let picked = pick(&mixed[0], &mixed, 3, true, round);
        assert_eq!(picked.len(), 2, "{picked:?}");
        assert!(picked.iter().all(|p| p.rail == Some(0)));
    }
}

#[test]
fn probes_run_at_most_parallel_at_once_and_keep_their_order() {
    let port = LocalPort {
        device: "rxe0".into(),
        port: 1,
        addr: Some("10.0.0.1".into()),
        fabric: None,
        rail: None,
    };
    let peers = fleet(10, 1);
    let work: Vec<_> = peers.iter().map(|p| (port.clone(), p.clone())).collect();
    let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let probes = run_all(&work, 3, |port, peer| {
        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(n, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        now.fetch_sub(1, Ordering::SeqCst);
        helper::to_probe(port, peer, 0, helper::parse_ping("{\"stage\":\"done\"}"))
    });
    assert_eq!(most.load(Ordering::SeqCst), 3);
    let order: Vec<_> = probes.iter().map(|p| p.peer.clone()).collect();
    assert_eq!(order, peers);
    assert!(run_all(&[], 4, |_, _| unreachable!()).is_empty());
}

fn round(t: u64) -> Round {
    Round {
        started_unix: t,
        finished_unix: t,
        probes: Vec::new(),
    }
}

#[test]
fn the_record_keeps_the_last_rounds_of_this_boot_only() {
    let mut rec = None;
    for t in 0..5 {
        rec = Some(next_record(rec, "b1", round(t), Vec::new(), Vec::new()));
    }
    let rec = rec.unwrap();
    let kept: Vec<u64> = rec.rounds.iter().map(|r| r.started_unix).collect();
    assert_eq!(kept, vec![2, 3, 4]);
    let after_reboot = next_record(Some(rec), "b2", round(9), Vec::new(), Vec::new());
    assert_eq!(after_reboot.rounds.len(), 1);
    assert_eq!(after_reboot.boot_id, "b2");
}

/// A node tree with one ACTIVE RoCE port and a stand-in helper; the round is
/// written as peers.json through the state writer.
#[test]
fn a_tick_probes_the_picked_peers_and_writes_the_record() {
    let t = tempfile::tempdir().unwrap();
    let put = |p: &str, s: &str| {
        let f = t.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, s).unwrap();
    };
    let dir = "/sys/class/infiniband/rxe0/ports/1";
    put(&format!("{dir}/state"), "4: ACTIVE\n");
    put(&format!("{dir}/link_layer"), "Ethernet\n");
    put(&format!("{dir}/gid_attrs/types/1"), "RoCE v2\n");
    put(
        &format!("{dir}/gids/1"),
        "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
    );
    put("/proc/sys/kernel/random/boot_id", "boot-1\n");
    let helper = t.path().join("probe");
    // ping answers done for .2 and a refusal for anything else; respond idles.
    std::fs::write(
        &helper,
        "#!/bin/sh\n[ \"$1\" = respond ] && exec sleep 30\n\
         case \"$5\" in 10.0.0.2) echo '{\"stage\":\"done\",\"rtt_us\":9}';; \
         *) echo '{\"stage\":\"rejected\",\"reject_why\":\"bad_key\",\"error\":\"refused\"}';; esac\n",
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = ProberSettings {
        enabled: true,
        helper,
        k: 2,
        ..ProberSettings::default()
    };
    let peers: Vec<Peer> = (1..=3)
        .map(|i| Peer {
            node: format!("n{i}"),
            addr: format!("10.0.0.{i}"),
            fabric: "roce:10.0.0.0/24".into(),
            rail: None,
        })
        .collect();
    let host = Host::new(t.path());
    let mut prober = Prober::default();
    let rec = prober.tick(&host, &s, "n1", &peers, None).unwrap();
    assert_eq!(rec.boot_id, "boot-1");
    let probes = &rec.rounds[0].probes;
    assert_eq!(probes.len(), 2, "{probes:?}");
    let stage = |addr: &str| probes.iter().find(|p| p.peer.addr == addr).map(|p| p.stage);
    assert_eq!(stage("10.0.0.2"), Some(Stage::Done));
    assert_eq!(stage("10.0.0.3"), Some(Stage::Rejected));
    assert!(
        probes
            .iter()
            .all(|p| p.src == "10.0.0.1" && p.device == "rxe0")
    );
    assert_eq!(rec.responders.len(), 1);
    assert!(rec.responders[0].running, "{:?}", rec.responders);
    let file = t.path().join("var/lib/rdma-node-agent/peers.json");
    let written: PeersRecord = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written, rec);
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let second = prober.tick(&host, &s, "n1", &peers, None).unwrap();
    assert_eq!(second.rounds.len(), 2);
}
