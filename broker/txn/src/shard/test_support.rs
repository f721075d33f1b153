//! A runtime for tests: a log that commits every append at once (keeping what it wrote), a
//! producer id block, tickets, and markers collected instead of sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::records::TxnValue;

/// Producer ids from 100 up; `fail` makes allocation fail.
pub(super) struct Pids {
    pub next: i64,
    pub fail: Option<TxnError>,
}

impl ProducerIds for Pids {
    fn next_producer_id(&mut self) -> Result<i64, TxnError> {
        if let Some(e) = self.fail {
            return Err(e);
        }
        self.next += 1;
        Ok(self.next - 1)
    }
}

#[derive(Debug, Default)]
pub(super) struct Out {
    pub answers: Vec<(Ticket, Answer)>,
    pub markers: Vec<Markers>,
}

pub(super) struct H {
    pub s: TxnShard,
    pub pids: Pids,
    /// Every record committed, in order.
    pub log: Vec<Write>,
    pub now: i64,
    ticket: u64,
}

pub(super) const T: &str = "tx";

pub(super) fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

pub(super) fn pe(producer_id: i64, epoch: i16) -> ProducerIdAndEpoch {
    ProducerIdAndEpoch::new(producer_id, epoch)
}

impl H {
    pub fn new() -> H {
        H::with(TxnConfig::default())
    }

    pub fn with(cfg: TxnConfig) -> H {
        H { s: TxnShard::new(cfg, 3), pids: Pids { next: 100, fail: None }, log: Vec::new(), now: 1_000, ticket: 0 }
    }

    pub fn ticket(&mut self) -> Ticket {
        self.ticket += 1;
        Ticket(self.ticket)
    }

    /// Executes commands as a healthy runtime would: appends commit at once.
    pub fn run(&mut self, cmds: Vec<Command>) -> Out {
        let mut out = Out::default();
        let mut queue: std::collections::VecDeque<Command> = cmds.into();
        while let Some(c) = queue.pop_front() {
            match c {
                Command::Append(w) => {
                    let id = w.transactional_id.clone();
                    self.log.push(w);
                    queue.extend(self.s.appended(&id, Ok(()), self.now));
                }
                Command::Answer(t, a) => out.answers.push((t, a)),
                Command::SendMarkers(m) => out.markers.push(m),
            }
        }
        out
    }

    /// The single answer of `out`.
    pub fn only(out: &Out) -> &Answer {
        assert_eq!(out.answers.len(), 1, "{out:?}");
        &out.answers[0].1
    }

    pub fn init_req(&self, id: &str, expected: Option<ProducerIdAndEpoch>) -> InitProducerId {
        InitProducerId { transactional_id: id.into(), transaction_timeout_ms: 60_000, expected }
    }

    pub fn init_cmds(&mut self, id: &str, expected: Option<ProducerIdAndEpoch>) -> Vec<Command> {
        let (t, req) = (self.ticket(), self.init_req(id, expected));
        self.s.init_producer_id(t, &req, self.now, &mut self.pids)
    }

    pub fn init(&mut self, id: &str, expected: Option<ProducerIdAndEpoch>) -> Result<ProducerIdAndEpoch, TxnError> {
        let cmds = self.init_cmds(id, expected);
        let out = self.run(cmds);
        match H::only(&out) {
            Answer::InitProducerId(r) => *r,
            a => panic!("{a:?}"),
        }
    }

    pub fn add_req(&self, p: ProducerIdAndEpoch, parts: &[TopicPartition], tv: i16) -> AddPartitions {
        AddPartitions {
            transactional_id: T.into(),
            producer_id: p.producer_id,
            producer_epoch: p.epoch,
            partitions: parts.to_vec(),
            client_transaction_version: tv,
        }
    }

    pub fn add(&mut self, p: ProducerIdAndEpoch, parts: &[TopicPartition], tv: i16) -> Result<(), TxnError> {
        let (t, req) = (self.ticket(), self.add_req(p, parts, tv));
        let cmds = self.s.add_partitions(t, &req, self.now);
        let out = self.run(cmds);
        match H::only(&out) {
            Answer::AddPartitions(r) => *r,
            a => panic!("{a:?}"),
        }
    }

    pub fn end_cmds(&mut self, p: ProducerIdAndEpoch, result: TxnResult, tv: i16) -> Vec<Command> {
        let req = EndTxn {
            transactional_id: T.into(),
            producer_id: p.producer_id,
            producer_epoch: p.epoch,
            result,
            client_transaction_version: tv,
        };
        let t = self.ticket();
        self.s.end_txn(t, &req, self.now, &mut self.pids)
    }

    /// EndTxn: its answer and the markers it sent (not yet written).
    pub fn end(
        &mut self,
        p: ProducerIdAndEpoch,
        result: TxnResult,
        tv: i16,
    ) -> (Result<ProducerIdAndEpoch, TxnError>, Vec<Markers>) {
        let cmds = self.end_cmds(p, result, tv);
        let out = self.run(cmds);
        match H::only(&out) {
            Answer::EndTxn(r) => (*r, out.markers),
            a => panic!("{a:?}"),
        }
    }

    /// The partition leaders write every marker.
    pub fn write_markers(&mut self, markers: &[Markers]) -> Out {
        let mut out = Out::default();
        for m in markers {
            for p in &m.partitions {
                let cmds = self.s.marker_written(&m.transactional_id, m.producer_id, m.producer_epoch, p);
                let o = self.run(cmds);
                out.answers.extend(o.answers);
                out.markers.extend(o.markers);
            }
        }
        out
    }

    /// A committed transaction of `tx` on two partitions, markers written.
    pub fn committed(&mut self, p: ProducerIdAndEpoch, tv: i16) -> ProducerIdAndEpoch {
        self.add(p, &[tp("a", 0), tp("b", 1)], tv).unwrap();
        let (r, markers) = self.end(p, TxnResult::Commit, tv);
        self.write_markers(&markers);
        let next = r.unwrap();
        if tv >= 2 { next } else { p }
    }

    pub fn state(&self) -> TxnState {
        self.s.get(T).unwrap().state
    }

    pub fn meta(&self) -> &TxnMetadata {
        self.s.get(T).unwrap()
    }

    /// The value last written for `tx`.
    pub fn last_value(&self) -> TxnValue {
        self.log.iter().rev().find(|w| w.transactional_id == T).unwrap().value.clone().unwrap()
    }

    /// A new coordinator replays the log (through its bytes) and finishes loading.
    pub fn reload(&self, now: i64) -> (TxnShard, Vec<Command>) {
        let mut s = TxnShard::new(*self.s.config(), 4);
        for w in &self.log {
            s.replay(&w.key(), w.value().as_deref()).unwrap();
        }
        let cmds = s.finish_load(now);
        (s, cmds)
    }

    /// Loads one stored state of `tx` (as if a previous coordinator had written it).
    pub fn load(&mut self, v: TxnValue) {
        self.s.replay(&crate::records::encode_key(T), Some(&v.encode())).unwrap();
    }
}

/// A stored state of `tx` for [`H::load`].
pub(super) fn stored(state: TxnState, producer_id: i64, epoch: i16) -> TxnValue {
    TxnValue {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch: epoch,
        timeout_ms: 60_000,
        state,
        partitions: Vec::new(),
        last_update_timestamp: 500,
        start_timestamp: -1,
        client_transaction_version: 2,
    }
}
