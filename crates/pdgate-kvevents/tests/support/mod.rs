//! Test helpers: a sink that records its calls, and a fake engine with hand-picked seqs.
#![allow(dead_code)]

use bytes::Bytes;
use parking_lot::Mutex;
use pdgate_kvevents::publisher::REPLAY_END_SEQ;
use pdgate_kvevents::wire::{encode, Encoding};
use pdgate_kvevents::{BlockRemoved, ClearReason, EventBatch, KvEvent, KvEventSink};
use std::sync::Arc;
use std::time::Duration;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// Upper bound of any wait in these tests.
pub const BOUND: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Apply(String, u64, Vec<KvEvent>),
    Clear(String, ClearReason),
}

/// Records every call; optionally sleeps in `apply` (a slow consumer).
#[derive(Default)]
pub struct RecordingSink {
    pub calls: Mutex<Vec<Call>>,
    pub slow: Option<Duration>,
}

impl KvEventSink for RecordingSink {
    fn apply(&self, endpoint: &str, batch: &EventBatch) {
        if let Some(d) = self.slow {
            std::thread::sleep(d);
        }
        self.calls.lock().push(Call::Apply(
            endpoint.into(),
            batch.seq,
            batch.events.clone(),
        ));
    }
    fn clear(&self, endpoint: &str, reason: ClearReason) {
        self.calls.lock().push(Call::Clear(endpoint.into(), reason));
    }
}

impl RecordingSink {
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock())
    }

    /// Waits (bounded) until `pred` holds over the calls so far.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&[Call]) -> bool) {
        let ok = tokio::time::timeout(BOUND, async {
            while !pred(&self.calls.lock()) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            ok.is_ok(),
            "timed out waiting for {what}; calls: {:?}",
            self.calls.lock()
        );
    }
}

pub fn removed(h: u64) -> Vec<KvEvent> {
    vec![KvEvent::BlockRemoved(BlockRemoved {
        block_hashes: vec![h],
        medium: Some("GPU".into()),
        group_idx: Some(0),
    })]
}

pub fn batch(seq: u64, events: Vec<KvEvent>) -> EventBatch {
    EventBatch {
        seq,
        ts: 1.5,
        dp_rank: Some(0),
        events,
    }
}

/// `(seq, payload)` the fake engine can replay.
pub type ReplayBuffer = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// An engine whose seqs the test chooses: a PUB socket and a replay ROUTER answering from
/// `buffer` (which the test fills, including messages never sent live).
pub struct FakeEngine {
    pub pub_socket: PubSocket,
    pub port: u16,
    pub replay_port: u16,
    pub buffer: ReplayBuffer,
    replay_task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeEngine {
    fn drop(&mut self) {
        self.replay_task.abort();
    }
}

async fn bind_port(socket: &mut impl Socket) -> u16 {
    match socket.bind("tcp://127.0.0.1:0").await.expect("bind") {
        zeromq::Endpoint::Tcp(_, port) => port,
        other => panic!("not tcp: {other}"),
    }
}

impl FakeEngine {
    pub async fn start() -> FakeEngine {
        let mut pub_socket = PubSocket::new();
        let port = bind_port(&mut pub_socket).await;
        let mut router = RouterSocket::new();
        let replay_port = bind_port(&mut router).await;
        let buffer: ReplayBuffer = Arc::default();
        let buf = buffer.clone();
        let replay_task = tokio::spawn(async move {
            while let Ok(req) = router.recv().await {
                let f = req.into_vec();
                let start = u64::from_be_bytes(f[2].as_ref().try_into().unwrap());
                let replies: Vec<(u64, Vec<u8>)> = buf
                    .lock()
                    .iter()
                    .filter(|(s, _)| *s >= start)
                    .cloned()
                    .collect();
                for (seq, payload) in replies {
                    let m = vec![
                        f[0].clone(),
                        Bytes::new(),
                        Bytes::copy_from_slice(&seq.to_be_bytes()),
                        Bytes::from(payload),
                    ];
                    router.send(ZmqMessage::try_from(m).unwrap()).await.unwrap();
                }
                let end = vec![
                    f[0].clone(),
                    Bytes::new(),
                    Bytes::from_static(&REPLAY_END_SEQ),
                    Bytes::new(),
                ];
                router
                    .send(ZmqMessage::try_from(end).unwrap())
                    .await
                    .unwrap();
            }
        });
        FakeEngine {
            pub_socket,
            port,
            replay_port,
            buffer,
            replay_task,
        }
    }

    pub fn publish_addr(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    pub fn replay_addr(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.replay_port)
    }

    /// Buffers the message for replay without sending it (a message the subscriber missed).
    pub fn buffer_only(&self, b: &EventBatch) {
        let [_, _, payload] = encode(b, Encoding::Tagged, b"");
        self.buffer.lock().push((b.seq, payload));
    }

    /// Sends (and buffers) a message.
    pub async fn send(&mut self, b: &EventBatch) {
        self.buffer_only(b);
        let frames = encode(b, Encoding::Tagged, b"");
        let m =
            ZmqMessage::try_from(frames.into_iter().map(Bytes::from).collect::<Vec<_>>()).unwrap();
        self.pub_socket.send(m).await.unwrap();
    }

    /// Sends seqs from `from` until the sink has applied one (the subscription has
    /// propagated), then waits until it applied the last one sent; clears the record.
    /// Returns the next seq to use.
    pub async fn warm_up(&mut self, sink: &RecordingSink, from: u64) -> u64 {
        let mut seq = from;
        let started = tokio::time::Instant::now();
        loop {
            self.send(&batch(seq, removed(seq))).await;
            seq += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            if sink
                .calls
                .lock()
                .iter()
                .any(|c| matches!(c, Call::Apply(..)))
            {
                break;
            }
            assert!(started.elapsed() < BOUND, "subscriber never received");
        }
        let last = seq - 1;
        sink.wait_for("the warm-up's last batch", |c| {
            c.iter()
                .any(|c| matches!(c, Call::Apply(_, s, _) if *s == last))
        })
        .await;
        sink.take();
        seq
    }
}
