//! The publisher speaks vLLM's wire: PUB frames `[topic, seq, payload]` with seq from 0, and
//! the replay ROUTER answers `["", seq]` with the buffered messages then the end marker.

use bytes::Bytes;
use pdgate_kvevents::publisher::REPLAY_END_SEQ;
use pdgate_kvevents::wire::{decode, decode_payload};
use pdgate_kvevents::{BlockRemoved, Encoding, KvEvent, Publisher};
use std::time::Duration;
use tokio::time::timeout;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

const BOUND: Duration = Duration::from_secs(10);

fn removed(h: u64) -> Vec<KvEvent> {
    vec![KvEvent::BlockRemoved(BlockRemoved {
        block_hashes: vec![h],
        medium: Some("GPU".into()),
        group_idx: Some(0),
    })]
}

fn frames(msg: &ZmqMessage) -> Vec<&[u8]> {
    msg.iter().map(|f| f.as_ref()).collect()
}

#[tokio::test]
async fn publishes_in_seq_order_and_replays_from_a_seq() {
    let publisher = Publisher::bind(
        "tcp://127.0.0.1:0",
        Some("tcp://127.0.0.1:0"),
        Encoding::Positional,
        3,
        Some(2),
    )
    .await
    .expect("bind");
    let mut sub = SubSocket::new();
    sub.connect(&format!("tcp://127.0.0.1:{}", publisher.publish_port()))
        .await
        .expect("connect");
    sub.subscribe("").await.expect("subscribe");

    // A PUB drops messages until the subscription has propagated: publish until one lands.
    let first = timeout(BOUND, async {
        loop {
            publisher.publish(removed(100));
            if let Ok(Ok(msg)) = timeout(Duration::from_millis(50), sub.recv()).await {
                return decode(&frames(&msg)).expect("decodes");
            }
        }
    })
    .await
    .expect("a message arrives");
    assert_eq!(first.dp_rank, Some(2));
    assert_eq!(first.events, removed(100));
    for h in 0..5 {
        publisher.publish(removed(h));
    }
    let mut seqs = Vec::new();
    let mut last = first.seq;
    while seqs.len() < 5 {
        let msg = timeout(BOUND, sub.recv())
            .await
            .expect("in time")
            .expect("recv");
        let b = decode(&frames(&msg)).expect("decodes");
        if b.events == removed(100) {
            last = b.seq;
            continue; // a late warm-up message
        }
        seqs.push((b.seq, b.events));
    }
    for (i, (seq, events)) in seqs.iter().enumerate() {
        assert_eq!(*seq, last + 1 + i as u64);
        assert_eq!(events, &removed(i as u64));
    }

    // Replay from the second-to-last: the buffer (3 steps) holds the last 3 messages.
    let mut dealer = DealerSocket::new();
    dealer
        .connect(&format!(
            "tcp://127.0.0.1:{}",
            publisher.replay_port().unwrap()
        ))
        .await
        .expect("connect replay");
    let from = last + 4;
    let req = vec![Bytes::new(), Bytes::copy_from_slice(&from.to_be_bytes())];
    dealer
        .send(ZmqMessage::try_from(req).unwrap())
        .await
        .expect("send");
    let mut replayed = Vec::new();
    loop {
        let msg = timeout(BOUND, dealer.recv())
            .await
            .expect("in time")
            .expect("recv");
        let f = frames(&msg);
        assert_eq!(f.len(), 3, "[\"\", seq, payload]");
        assert!(f[0].is_empty());
        if f[2].is_empty() {
            assert_eq!(f[1], REPLAY_END_SEQ);
            break;
        }
        let seq = u64::from_be_bytes(f[1].try_into().unwrap());
        replayed.push(decode_payload(seq, f[2]).expect("decodes").batch);
    }
    let got: Vec<(u64, Vec<KvEvent>)> = replayed.into_iter().map(|b| (b.seq, b.events)).collect();
    assert_eq!(got, vec![(last + 4, removed(3)), (last + 5, removed(4))]);
}
