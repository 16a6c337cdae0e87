//! Raft RPCs between brokers: one request per frame (4-byte big-endian length, then bincode),
//! answered in order on the same connection — plain TCP, or mutual TLS with `CONTROLLER:SSL`
//! (`use_tls`; docs/security.md). Besides openraft's AppendEntries, Vote and
//! InstallSnapshot, a follower forwards metadata writes to the leader (`Forward`).

use super::failover::Carried;
use super::rpc_health::{self, Outcome};
use super::{ClusterNode, Command, CommandResult, NodeId, TypeConfig};
use crate::replication::log_store::Logged;
use crate::replication::types::{decode_sharing, GroupKey, KvEntry, PartCommand, PartConfig, ShardConfig};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection between brokers: plain TCP, or TLS over it.
pub trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> PeerIo for T {}
pub(crate) type Conn = Box<dyn PeerIo>;

/// The Raft port's mutual TLS (`CONTROLLER:SSL`), set once when the broker starts; unset: plain
/// TCP.
static PEER_TLS: std::sync::OnceLock<PeerTls> = std::sync::OnceLock::new();

struct PeerTls {
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
}

/// Use mutual TLS on the Raft port and for every RPC to a peer's (before any starts; built by
/// `security::tls::peer_tls`).
pub fn use_tls(acceptor: tokio_rustls::TlsAcceptor, connector: tokio_rustls::TlsConnector) {
    let _ = PEER_TLS.set(PeerTls { acceptor, connector });
}

/// Open a connection to the peer at `addr` (TLS when configured: the peer's certificate must
/// name `addr`'s host and chain to the truststore, and this broker presents its own).
async fn connect(addr: &str) -> std::io::Result<Conn> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    match PEER_TLS.get() {
        None => Ok(Box::new(s)),
        Some(tls) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']);
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| std::io::Error::other(format!("{addr}: {e}")))?;
            Ok(Box::new(tls.connector.connect(name, s).await?))
        }
    }
}

/// Largest RPC frame accepted (snapshots of the metadata image are small).
const FRAME_MAX: usize = 64 * 1024 * 1024;

/// One RPC between brokers (its wire form: bincode; new variants go at the end).
#[derive(Debug, Serialize, Deserialize)]
pub enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Forward(Command),
    /// The same three for a partition's Raft group.
    PartAppend(GroupKey, AppendEntriesRequest<PartConfig>),
    PartVote(GroupKey, VoteRequest<NodeId>),
    PartSnapshot(GroupKey, InstallSnapshotRequest<PartConfig>),
    /// Stand for election in a partition's group now (ElectLeaders: the preferred replica).
    PartElect(GroupKey),
    /// A broker joining a running cluster asks to be added (id, Raft address).
    Join(NodeId, String),
    /// Remove a broker from the quorum and the broker list (UnregisterBroker).
    Leave(NodeId),
    /// Drop a broker from every coordinator shard group this broker is a member of (the groups
    /// it leads change their membership; it waits for the others).
    DropFromCoordinators(NodeId),
    /// AppendEntries, Vote and InstallSnapshot for a coordinator shard's Raft group.
    ShardAppend(GroupKey, AppendEntriesRequest<ShardConfig>),
    ShardVote(GroupKey, VoteRequest<NodeId>),
    ShardSnapshot(GroupKey, InstallSnapshotRequest<ShardConfig>),
    /// A peer broker's Kafka request frame (without its size prefix) for this broker's request
    /// pipeline (`interbroker.rs`): answered `Ok(response frame)`.
    Kafka(Vec<u8>),
    /// This broker's copy of the batch holding an offset of a partition it replicates, for a
    /// replica that repairs its own (`mend.rs`): answered `Ok(batch bytes)`.
    PartCopy(GroupKey, i64),
    /// This broker's live records of a coordinator shard it replicates and the last entry they
    /// include, for a replica that replaces its damaged log (`mend.rs`): answered
    /// `Ok((index, records))`.
    ShardCopy(GroupKey),
    /// Stand for election in a coordinator shard's group now (a damaged leader hands over).
    ShardElect(GroupKey),
    /// Where this broker's replica of a partition keeps its Raft log, for a new replica of the
    /// group (`replica::start`): answered `Ok(Some(single))`, or `Ok(None)` with no replica
    /// here. (Brokers of earlier versions fail to decode this one and the next.)
    PartFormat(GroupKey),
    /// Whether this broker's replica of a partition holds more than a birth (decision 0052),
    /// running or on disk: answered `Ok(false)` with no replica here. Last, so brokers of
    /// earlier versions fail to decode only this one.
    PartHeld(GroupKey),
}

/// A kind of Raft group carried by [`GroupNetwork`]: how its three RPCs are framed.
pub trait GroupRpc: Logged {
    fn append(group: GroupKey, rpc: AppendEntriesRequest<Self>) -> Rpc;
    fn vote(group: GroupKey, rpc: VoteRequest<NodeId>) -> Rpc;
    fn snapshot(group: GroupKey, rpc: InstallSnapshotRequest<Self>) -> Rpc;
}

impl GroupRpc for PartConfig {
    fn append(group: GroupKey, rpc: AppendEntriesRequest<Self>) -> Rpc {
        Rpc::PartAppend(group, rpc)
    }
    fn vote(group: GroupKey, rpc: VoteRequest<NodeId>) -> Rpc {
        Rpc::PartVote(group, rpc)
    }
    fn snapshot(group: GroupKey, rpc: InstallSnapshotRequest<Self>) -> Rpc {
        Rpc::PartSnapshot(group, rpc)
    }
}

impl GroupRpc for ShardConfig {
    fn append(group: GroupKey, rpc: AppendEntriesRequest<Self>) -> Rpc {
        Rpc::ShardAppend(group, rpc)
    }
    fn vote(group: GroupKey, rpc: VoteRequest<NodeId>) -> Rpc {
        Rpc::ShardVote(group, rpc)
    }
    fn snapshot(group: GroupKey, rpc: InstallSnapshotRequest<Self>) -> Rpc {
        Rpc::ShardSnapshot(group, rpc)
    }
}

async fn write_frame(s: &mut (impl AsyncWrite + Unpin + ?Sized), body: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(body.len()).map_err(|_| std::io::Error::other("frame too large"))?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(body);
    s.write_all(&buf).await
}

/// `rpc` as one frame: its length and its bincode, in parts. The `Stored` batches of a
/// partition's append are parts of their own, the entries' shared bytes, so a batch is not
/// copied on its way to the socket (decision 0062); the rest is serialized into buffers.
fn framed(rpc: &Rpc) -> std::io::Result<Vec<bytes::Bytes>> {
    let size = bincode::serialized_size(rpc).map_err(std::io::Error::other)?;
    let len = u32::try_from(size).map_err(|_| std::io::Error::other("frame too large"))?;
    let lent = match rpc {
        Rpc::PartAppend(_, req) => req
            .entries
            .iter()
            .filter_map(|e| match &e.payload {
                openraft::EntryPayload::Normal(PartCommand::Stored { batch }) => Some(batch.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut frame = Gather { lent, next: 0, head: Vec::with_capacity(4096), parts: Vec::new() };
    frame.head.extend_from_slice(&len.to_be_bytes());
    bincode::serialize_into(&mut frame, rpc).map_err(std::io::Error::other)?;
    if !frame.head.is_empty() {
        frame.parts.push(bytes::Bytes::from(frame.head));
    }
    Ok(frame.parts)
}

/// A frame as bincode writes it ([`framed`]): a write of exactly the next lent batch's bytes
/// (bincode writes a byte string with one `write_all` after its length) becomes that batch as
/// a part of its own; every other write is copied into the current buffer.
struct Gather {
    lent: Vec<bytes::Bytes>,
    next: usize,
    head: Vec<u8>,
    parts: Vec<bytes::Bytes>,
}

impl std::io::Write for Gather {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.lent.get(self.next) {
            Some(b) if !buf.is_empty() && b.as_ptr() == buf.as_ptr() && b.len() == buf.len() => {
                if !self.head.is_empty() {
                    self.parts.push(bytes::Bytes::from(std::mem::take(&mut self.head)));
                }
                self.parts.push(b.clone());
                self.next += 1;
            }
            _ => self.head.extend_from_slice(buf),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Write `parts` whole, in order, with vectored writes.
async fn write_parts(s: &mut (impl AsyncWrite + Unpin + ?Sized), mut parts: Vec<bytes::Bytes>) -> std::io::Result<()> {
    use bytes::Buf;
    let mut i = 0;
    while i < parts.len() {
        if parts[i].is_empty() {
            i += 1;
            continue;
        }
        let slices: Vec<std::io::IoSlice> = parts[i..].iter().take(64).map(|p| std::io::IoSlice::new(p)).collect();
        let mut n = s.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 && i < parts.len() {
            let l = parts[i].len();
            if n >= l {
                n -= l;
                i += 1;
            } else {
                parts[i].advance(n);
                n = 0;
            }
        }
    }
    Ok(())
}

pub(crate) async fn read_frame(s: &mut (impl AsyncRead + Unpin + ?Sized)) -> std::io::Result<Vec<u8>> {
    use bytes::BufMut;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > FRAME_MAX {
        return Err(std::io::Error::other(format!("frame of {len} bytes is over the limit")));
    }
    // read into the buffer's spare room: a megabyte append is not zeroed first
    let mut body = Vec::with_capacity(len);
    while body.len() < len {
        let want = len - body.len();
        if s.read_buf(&mut (&mut body).limit(want)).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(body)
}

/// One request-response exchange on `conn` (opened if needed), bounded by `ttl`.
///
/// The connection is taken out of `conn` for the exchange and put back only once its answer
/// has been read whole: an exchange that fails, times out, or is cancelled (openraft drops an
/// append's future when its own timer, the heartbeat interval, runs out) leaves `conn` empty.
/// A connection with an unread answer in it is never used again: the next exchange on it
/// would read that answer as its own (an earlier heartbeat's success taken for a later
/// append's, so the leader would count entries the follower had not stored).
async fn exchange<R: DeserializeOwned + Send + 'static>(
    conn: &mut Option<Conn>,
    addr: &str,
    rpc: Rpc,
    ttl: Duration,
) -> std::io::Result<R> {
    // (a pipeline of one)
    let mut answers = Vec::with_capacity(1);
    exchange_pipelined(conn, addr, vec![rpc], ttl, &mut answers).await?;
    answers.pop().ok_or_else(|| std::io::ErrorKind::UnexpectedEof.into())
}

/// How long an append's exchange that timed out is still read for its answers
/// ([`GroupPeer`]'s flight): a follower that works on it still answers.
const LATE_ANSWERS: Duration = Duration::from_secs(5);

/// What the task running an exchange hands its reader ([`Exchange`]).
enum Read<R> {
    Answer(R),
    /// Every answer read: the connection, for the next exchange.
    Done(Conn),
    Failed(std::io::Error),
}

/// An exchange under way on a task of its own, which owns the connection: its answers as they
/// are read, then the connection back. Dropped before the end, the task stops and the
/// connection is closed.
struct Exchange<R> {
    rx: tokio::sync::mpsc::UnboundedReceiver<Read<R>>,
    addr: String,
}

impl<R: DeserializeOwned + Send + 'static> Exchange<R> {
    /// Send `rpcs` on `conn` (opened if none), each written without waiting for the answers
    /// before it, and read their answers, all within `bound`.
    fn start(conn: Option<Conn>, addr: &str, rpcs: Vec<Rpc>, bound: Duration) -> Exchange<R> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Read<R>>();
        let peer = addr.to_string();
        tokio::spawn(async move {
            let work = async {
                let s = match conn {
                    Some(s) => s,
                    None => connect(&peer).await?,
                };
                let (mut rd, mut wr) = tokio::io::split(s);
                let sending = async {
                    for rpc in &rpcs {
                        write_parts(&mut wr, framed(rpc)?).await?;
                    }
                    Ok::<_, std::io::Error>(())
                };
                // answers are read while later requests are written: a peer answering each
                // before it reads the next (one of an earlier version) is not left waiting
                let reading = async {
                    for _ in 0..rpcs.len() {
                        let answer = read_frame(&mut rd).await?;
                        let answer = bincode::deserialize(&answer).map_err(std::io::Error::other)?;
                        let _ = tx.send(Read::Answer(answer));
                    }
                    Ok::<_, std::io::Error>(())
                };
                tokio::try_join!(sending, reading)?;
                Ok::<_, std::io::Error>(rd.unsplit(wr))
            };
            let end = tokio::select! {
                end = tokio::time::timeout(bound, work) => end,
                _ = tx.closed() => return, // no one reads on
            };
            let _ = tx.send(match end {
                Ok(Ok(s)) => Read::Done(s),
                Ok(Err(e)) => Read::Failed(e),
                Err(_) => Read::Failed(std::io::Error::new(std::io::ErrorKind::TimedOut, "RPC timed out")),
            });
        });
        Exchange { rx, addr: addr.to_string() }
    }

    /// Read answers onto `answers` until the exchange ends (`Some`: the connection back, every
    /// answer read) or `deadline` (`None`: answers still due).
    async fn read_until(
        &mut self,
        deadline: tokio::time::Instant,
        answers: &mut Vec<R>,
    ) -> std::io::Result<Option<Conn>> {
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Read::Answer(answer))) => answers.push(answer),
                Ok(Some(Read::Done(s))) => return Ok(Some(s)),
                Ok(Some(Read::Failed(e))) => return Err(std::io::Error::new(e.kind(), format!("{}: {e}", self.addr))),
                Ok(None) => return Err(std::io::Error::other(format!("{}: the exchange's task ended", self.addr))),
                Err(_) => return Ok(None),
            }
        }
    }
}

/// Several requests on `conn` (opened if needed), each written without waiting for the
/// answers before it, all bounded by `ttl`; the answers read are pushed on `answers` in order.
/// As in [`exchange`], the connection is put back only once every answer has been read.
async fn exchange_pipelined<R: DeserializeOwned + Send + 'static>(
    conn: &mut Option<Conn>,
    addr: &str,
    rpcs: Vec<Rpc>,
    ttl: Duration,
    answers: &mut Vec<R>,
) -> std::io::Result<()> {
    let mut exchange = Exchange::start(conn.take(), addr, rpcs, ttl);
    match exchange.read_until(tokio::time::Instant::now() + ttl, answers).await? {
        Some(s) => {
            *conn = Some(s);
            Ok(())
        }
        None => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{addr}: RPC timed out"))),
    }
}

/// Creates connections to peers (openraft calls it per target).
///
/// A peer is reached at the address *this* broker's `controller.quorum.voters` gives for it,
/// not the one in the group's membership (which the initializing broker wrote): each broker
/// may name its peers differently — e.g. through a proxy per link, so faults can cut the
/// network between two brokers. Brokers that joined later are reached at their membership
/// address.
pub struct Network {
    pub book: Arc<std::collections::BTreeMap<NodeId, String>>,
}

fn resolve(book: &std::collections::BTreeMap<NodeId, String>, target: NodeId, node: &BasicNode) -> String {
    book.get(&target).cloned().unwrap_or_else(|| node.addr.clone())
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer { target, addr: resolve(&self.book, target, node), conn: None }
    }
}

/// The connection to one peer.
pub struct Peer {
    target: NodeId,
    addr: String,
    conn: Option<Conn>,
}

impl Peer {
    async fn call<T, E>(&mut self, rpc: Rpc, ttl: Duration) -> Result<T, RPCError<NodeId, BasicNode, E>>
    where
        T: DeserializeOwned + Send + 'static,
        E: std::error::Error + DeserializeOwned + Send + 'static,
    {
        // counted per peer however it ends, dropped by openraft's timer included (`rpc_health`)
        let pending = rpc_health::Pending::start(&rpc_health::HEALTH, self.target);
        let answer: Result<Result<T, E>, std::io::Error> = exchange(&mut self.conn, &self.addr, rpc, ttl).await;
        match answer {
            Ok(answer) => {
                pending.finish(Outcome::Answered, None);
                self.answered(answer)
            }
            Err(e) => Err(self.failed(Some(pending), e)),
        }
    }

    #[allow(clippy::result_large_err)] // openraft's error type
    fn answered<T, E: std::error::Error>(&self, answer: Result<T, E>) -> Result<T, RPCError<NodeId, BasicNode, E>> {
        // an error answered by the peer: the RPC reached it (its Raft refused it, e.g. a
        // shut-down group)
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    /// An exchange that got no answer, as openraft's error (and counted by `rpc_health`).
    /// (`pending`: `None` once counted, as an append whose first deadline passed)
    fn failed<E: std::error::Error>(
        &self,
        pending: Option<rpc_health::Pending>,
        e: std::io::Error,
    ) -> RPCError<NodeId, BasicNode, E> {
        let finish = |outcome, error: &dyn std::fmt::Display| {
            if let Some(p) = pending {
                p.finish(outcome, Some(error));
            }
        };
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                finish(Outcome::Refused, &e);
                RPCError::Unreachable(Unreachable::new(&e))
            }
            // `serve` closes the connection on an RPC for a group it has no replica of (yet: a
            // broker that just started, a topic being created) or that does not vote now: as
            // for a refused connection, openraft waits `backoff` before the next try. As a
            // network error it retried at once on every event: a Jepsen power-cut run counted
            // 1,200 such RPCs a second from one broker to a restarting peer, for 30 s.
            std::io::ErrorKind::UnexpectedEof => {
                finish(
                    Outcome::Failed,
                    &"connection closed before an answer (no replica of the group there yet, or stopping)",
                );
                RPCError::Unreachable(Unreachable::new(&e))
            }
            kind => {
                match kind {
                    std::io::ErrorKind::TimedOut => finish(Outcome::TimedOut, &e),
                    _ => finish(Outcome::Failed, &e),
                }
                RPCError::Network(NetworkError::new(&e))
            }
        }
    }
}

/// How long openraft waits before the next RPC to a peer that refused the connection or closed
/// it without answering (openraft's default is 500 ms, a whole heartbeat).
const RETRY_UNREACHABLE: Duration = Duration::from_millis(200);

fn unreachable_backoff() -> openraft::network::Backoff {
    openraft::network::Backoff::new(std::iter::repeat(RETRY_UNREACHABLE))
}

impl RaftNetwork<TypeConfig> for Peer {
    fn backoff(&self) -> openraft::network::Backoff {
        unreachable_backoff()
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::Append(rpc), option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        self.call(Rpc::Snapshot(rpc), option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::Vote(rpc), option.hard_ttl()).await
    }
}

/// Connections for one partition's or coordinator shard's Raft group (same port, the group
/// named in each RPC). Like [`Network`], each peer is reached at the address this broker has
/// for it.
pub struct GroupNetwork<C> {
    pub group: GroupKey,
    pub book: Arc<std::collections::BTreeMap<NodeId, String>>,
    /// Bytes of entries per AppendEntries frame ([`GroupNetwork::pipelined`]).
    chunk_bytes: usize,
    /// Where each follower's answers to appends are noted ([`GroupNetwork::noting_answers`]).
    answering: Option<Arc<super::replica::Answering>>,
    kind: std::marker::PhantomData<fn() -> C>,
}

/// A partition's Raft group transport.
pub type PartNetwork = GroupNetwork<PartConfig>;
/// A coordinator shard's Raft group transport.
pub type ShardNetwork = GroupNetwork<ShardConfig>;

impl<C> GroupNetwork<C> {
    /// The transport of group `group`, reaching each peer at the address `addresses` gives.
    /// (What one append carries is bounded where its entries are read: `LogStore::limit_reads`.)
    pub fn new(group: &GroupKey, addresses: &std::collections::BTreeMap<NodeId, String>) -> GroupNetwork<C> {
        GroupNetwork {
            group: group.clone(),
            book: Arc::new(addresses.clone()),
            chunk_bytes: usize::MAX,
            answering: None,
            kind: std::marker::PhantomData,
        }
    }

    /// Note in `answering` each time a follower answers an append or a heartbeat (a partition's
    /// leader lets a follower that stopped answering go: `replica::Answering`).
    pub fn noting_answers(mut self, answering: Arc<super::replica::Answering>) -> GroupNetwork<C> {
        self.answering = Some(answering);
        self
    }

    /// Send each append as frames of about `bytes` of entries each (an entry over it alone),
    /// written one after the other without waiting for their answers (decision 0058).
    pub fn pipelined(mut self, bytes: usize) -> GroupNetwork<C> {
        self.chunk_bytes = bytes.max(1);
        self
    }
}

impl<C: GroupRpc> RaftNetworkFactory<C> for GroupNetwork<C> {
    type Network = GroupPeer<C>;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> GroupPeer<C> {
        GroupPeer {
            group: self.group.clone(),
            peer: Peer { target, addr: resolve(&self.book, target, node), conn: None },
            chunk_bytes: self.chunk_bytes,
            answering: self.answering.clone(),
            flight: None,
            took: None,
            kind: std::marker::PhantomData,
        }
    }
}

/// One replication stream's transport to a follower: a partition's or coordinator shard's
/// Raft group on one peer.
pub struct GroupPeer<C> {
    group: GroupKey,
    peer: Peer,
    chunk_bytes: usize,
    answering: Option<Arc<super::replica::Answering>>,
    /// An append whose answers were not all read by its deadline: read on before the next
    /// is sent (decision 0061).
    flight: Option<Flight>,
    /// The last entry the follower is known to have taken from this leader (its vote) by an
    /// append whose answer came after openraft had given up on it: not sent again.
    took: Option<(openraft::Vote<NodeId>, openraft::LogId<NodeId>)>,
    kind: std::marker::PhantomData<fn() -> C>,
}

/// A follower's answer to an append, as read off the connection.
type AppendAnswer = Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>;

/// A copy of `a` (openraft's answer is not `Clone`).
#[allow(clippy::result_large_err)] // openraft's error type
fn copy_answer(a: &AppendAnswer) -> AppendAnswer {
    match a {
        Ok(AppendEntriesResponse::Success) => Ok(AppendEntriesResponse::Success),
        Ok(AppendEntriesResponse::PartialSuccess(m)) => Ok(AppendEntriesResponse::PartialSuccess(*m)),
        Ok(AppendEntriesResponse::Conflict) => Ok(AppendEntriesResponse::Conflict),
        Ok(AppendEntriesResponse::HigherVote(v)) => Ok(AppendEntriesResponse::HigherVote(*v)),
        Err(e) => Err(e.clone()),
    }
}

/// An append sent to a follower, as one or more frames (`split_append`), not all answered yet.
struct Flight {
    vote: openraft::Vote<NodeId>,
    /// Each frame's last entry.
    lasts: Vec<Option<openraft::LogId<NodeId>>>,
    answers: Vec<AppendAnswer>,
    exchange: Exchange<AppendAnswer>,
    /// Counted (`rpc_health`) when it ends or its first deadline passes.
    pending: Option<rpc_health::Pending>,
    /// Sent without entries the follower took late (`trim_append`).
    trimmed: bool,
}

/// `rpc` less the entries the follower holds: those up to `took`, which it took from the
/// same leader (vote) in an append answered after openraft gave up on it. When it holds
/// them all, a heartbeat at `rpc`'s last entry: it carries the commit index, and its success
/// tells openraft that the follower holds that entry.
fn trim_append<C: openraft::RaftTypeConfig<NodeId = NodeId>>(
    rpc: AppendEntriesRequest<C>,
    took: openraft::LogId<NodeId>,
) -> AppendEntriesRequest<C> {
    use openraft::RaftLogId;
    let Some(last) = rpc.entries.last().map(|e| *e.get_log_id()) else { return rpc };
    if rpc.prev_log_id.is_some_and(|p| p.index >= took.index) {
        return rpc;
    }
    let AppendEntriesRequest { vote, leader_commit, entries, .. } = rpc;
    if took.index >= last.index {
        return AppendEntriesRequest { vote, prev_log_id: Some(last), leader_commit, entries: Vec::new() };
    }
    let entries = entries.into_iter().filter(|e| e.get_log_id().index > took.index).collect();
    AppendEntriesRequest { vote, prev_log_id: Some(took), leader_commit, entries }
}

/// `rpc` as appends of about `bytes` of entries each (an entry over it alone; at least one
/// append, a heartbeat's without entries), each following the one before it.
fn split_append<C: openraft::RaftTypeConfig>(
    rpc: AppendEntriesRequest<C>,
    bytes: usize,
) -> Vec<AppendEntriesRequest<C>> {
    use openraft::RaftLogId;
    let AppendEntriesRequest { vote, prev_log_id, leader_commit, entries } = rpc;
    let mut appends = Vec::new();
    let (mut prev, mut taken, mut size) = (prev_log_id, Vec::new(), 0usize);
    for e in entries {
        let n = bincode::serialized_size(&e).map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
        if !taken.is_empty() && size.saturating_add(n) > bytes {
            let last = taken.last().map(|e: &C::Entry| e.get_log_id().clone());
            let entries = std::mem::take(&mut taken);
            appends.push(AppendEntriesRequest {
                vote: vote.clone(),
                prev_log_id: prev,
                leader_commit: leader_commit.clone(),
                entries,
            });
            (prev, size) = (last, 0);
        }
        size = size.saturating_add(n);
        taken.push(e);
    }
    appends.push(AppendEntriesRequest { vote, prev_log_id: prev, leader_commit, entries: taken });
    appends
}

/// The answer to an append sent as several (`split_append`), from theirs in order (`lasts`:
/// each one's last entry): what the follower took, up to the first it refused or did not
/// answer. The first one's refusal or failure is the answer, as for one append.
#[allow(clippy::result_large_err)] // openraft's error type
fn joined_answer<E>(
    answers: Vec<Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, E>>>,
    stopped: Option<RPCError<NodeId, BasicNode, E>>,
    lasts: &[Option<openraft::LogId<NodeId>>],
) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, E>>
where
    E: std::error::Error,
{
    let mut took = None;
    for (answer, last) in answers.into_iter().zip(lasts) {
        match answer {
            Ok(AppendEntriesResponse::Success) => took = Some(*last),
            // a higher vote ends this leader's appends whatever came before it
            Ok(AppendEntriesResponse::HigherVote(v)) => return Ok(AppendEntriesResponse::HigherVote(v)),
            Ok(AppendEntriesResponse::PartialSuccess(m)) => return Ok(AppendEntriesResponse::PartialSuccess(m)),
            refused if took.is_none() => return refused,
            _ => break,
        }
    }
    match took {
        Some(m) if Some(&m) == lasts.last() => Ok(AppendEntriesResponse::Success),
        Some(m) => Ok(AppendEntriesResponse::PartialSuccess(m)),
        None => Err(stopped.unwrap_or_else(|| {
            RPCError::Network(NetworkError::new(&std::io::Error::other("no answer to a pipelined append")))
        })),
    }
}

impl<C> GroupPeer<C> {
    /// Read the flight's answers until it ends or `deadline`: once it ended (it is gone then),
    /// its answer (as one, `joined_answer`) and its last entry; `None` while answers are due.
    #[allow(clippy::type_complexity, clippy::result_large_err)] // openraft's error type
    async fn land(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> Option<(
        Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>>,
        Option<openraft::LogId<NodeId>>,
    )> {
        let flight = self.flight.as_mut()?;
        let mut got = Vec::new();
        let end = flight.exchange.read_until(deadline, &mut got).await;
        // (the follower's Raft answered: it is alive, if slow — `replica::Answering`)
        if let (true, Some(a)) = (got.iter().any(|a| a.is_ok()), &self.answering) {
            a.answered(self.peer.target);
        }
        flight.answers.extend(got);
        let stopped = match end {
            Ok(None) => return None,
            Ok(Some(conn)) => {
                self.peer.conn = Some(conn);
                if let Some(p) = flight.pending.take() {
                    p.finish(Outcome::Answered, None);
                }
                None
            }
            Err(e) => Some(self.peer.failed(flight.pending.take(), e)),
        };
        let flight = self.flight.take()?;
        let answers = flight.answers.into_iter().map(|a| self.peer.answered(a)).collect();
        let answer = self.unless_lost(flight.trimmed, joined_answer(answers, stopped, &flight.lasts));
        Some((answer, flight.lasts.last().copied().flatten()))
    }

    /// `answer` to an append, unless it was trimmed (`trim_append`) and refused: then the
    /// follower no longer holds what it took (its data wiped within this leader's term, say).
    /// What it took is forgotten, and openraft is told of a failure, not of a conflict at a
    /// point it did not send (at none, openraft's replication would stop on it), so it sends
    /// the append again, whole.
    #[allow(clippy::result_large_err)] // openraft's error type
    fn unless_lost(
        &mut self,
        trimmed: bool,
        answer: Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>>,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        if !(trimmed && matches!(answer, Ok(AppendEntriesResponse::Conflict))) {
            return answer;
        }
        self.took = None;
        let e = std::io::Error::other(format!("{}: no longer holds the entries it took", self.peer.addr));
        Err(RPCError::Network(NetworkError::new(&e)))
    }
}

impl<C: GroupRpc> RaftNetwork<C> for GroupPeer<C> {
    fn backoff(&self) -> openraft::network::Backoff {
        unreachable_backoff()
    }

    /// Bounded by openraft's soft limit: an exchange cut short by a slow follower ends with
    /// the answers it read (what the follower took counts) before openraft's own timer, the
    /// hard limit, drops them all. Its other answers are read before the next append is sent
    /// (decision 0061): the follower is not sent again what it is still writing, and what it
    /// took is not sent at all.
    #[allow(clippy::result_large_err)] // openraft's error type
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        use openraft::RaftLogId;
        let deadline = tokio::time::Instant::now() + option.soft_ttl();
        let addr = self.peer.addr.clone();
        let timed_out = |what: &str| {
            let e = std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{addr}: {what}"));
            RPCError::Network(NetworkError::new(&e))
        };
        if self.flight.as_ref().is_some_and(|f| f.vote != rpc.vote) {
            self.flight = None; // (another term's)
        }
        if self.flight.is_some() {
            let took = match self.land(deadline).await {
                None => return Err(timed_out("an earlier append is still unanswered")),
                // (a higher vote ends this leader's appends, whichever carried it)
                Some((Ok(AppendEntriesResponse::HigherVote(v)), _)) => return Ok(AppendEntriesResponse::HigherVote(v)),
                Some((Ok(AppendEntriesResponse::Success), last)) => last,
                Some((Ok(AppendEntriesResponse::PartialSuccess(m)), _)) => m,
                // refused or failed: this append goes as openraft asks
                Some(_) => None,
            };
            if let Some(took) = took {
                if self.took.as_ref().is_none_or(|(v, t)| *v != rpc.vote || t.index < took.index) {
                    self.took = Some((rpc.vote, took));
                }
            }
        }
        let (rpc, trimmed) = match &self.took {
            Some((v, took)) if *v == rpc.vote => {
                let sent = (rpc.prev_log_id, rpc.entries.len());
                let rpc = trim_append(rpc, *took);
                let trimmed = sent != (rpc.prev_log_id, rpc.entries.len());
                (rpc, trimmed)
            }
            _ => (rpc, false),
        };
        let vote = rpc.vote;
        let appends = split_append(rpc, self.chunk_bytes);
        let lasts: Vec<_> = appends.iter().map(|a| a.entries.last().map(|e| *e.get_log_id())).collect();
        let rpcs = appends.into_iter().map(|a| C::append(self.group.clone(), a)).collect();
        let exchange = Exchange::start(self.peer.conn.take(), &self.peer.addr, rpcs, option.soft_ttl() + LATE_ANSWERS);
        let pending = Some(rpc_health::Pending::start(&rpc_health::HEALTH, self.peer.target));
        self.flight = Some(Flight { vote, lasts, answers: Vec::new(), exchange, pending, trimmed });
        if let Some((answer, _)) = self.land(deadline).await {
            return answer;
        }
        // not all answered in time: what the follower answered so far is the answer, and the
        // rest is read on at the next append (counted now as timed out, as it is for openraft)
        let Some(flight) = self.flight.as_mut() else { return Err(timed_out("RPC timed out")) };
        let e = timed_out("RPC timed out");
        if let Some(p) = flight.pending.take() {
            p.finish(Outcome::TimedOut, Some(&e));
        }
        let answers = flight.answers.iter().map(|a| self.peer.answered(copy_answer(a))).collect();
        let answer = joined_answer(answers, Some(e), &flight.lasts);
        let trimmed = flight.trimmed;
        self.unless_lost(trimmed, answer)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<C>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        self.peer.call(C::snapshot(self.group.clone(), rpc), option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.peer.call(C::vote(self.group.clone(), rpc), option.hard_ttl()).await
    }
}

/// Ask the voter at `addr` to add broker `id` (Raft address `own`) to the cluster.
pub async fn join(addr: &str, id: NodeId, own: &str) -> anyhow::Result<()> {
    let mut conn = None;
    let answer: Result<(), String> =
        exchange(&mut conn, addr, Rpc::Join(id, own.to_string()), Duration::from_secs(150)).await?;
    answer.map_err(|e| anyhow::anyhow!("{addr}: {e}"))
}

/// Ask the voter at `addr` to remove broker `id` from the cluster.
pub async fn leave(addr: &str, id: NodeId) -> anyhow::Result<()> {
    let mut conn = None;
    let answer: Result<(), String> = exchange(&mut conn, addr, Rpc::Leave(id), Duration::from_secs(60)).await?;
    answer.map_err(|e| anyhow::anyhow!("{addr}: {e}"))
}

/// Ask the broker at `addr` to drop broker `id` from the coordinator shard groups it is in.
pub async fn drop_from_coordinators(addr: &str, id: NodeId) -> anyhow::Result<()> {
    let mut conn = None;
    let answer: Result<(), String> =
        exchange(&mut conn, addr, Rpc::DropFromCoordinators(id), Duration::from_secs(60)).await?;
    answer.map_err(|e| anyhow::anyhow!("{addr}: {e}"))
}

/// Ask broker `target` to stand for election in `topic`/`partition`'s Raft group.
pub async fn elect(node: &ClusterNode, target: NodeId, topic: &str, partition: i32) -> anyhow::Result<()> {
    elect_in(node, target, (topic.to_string(), partition), GroupKind::Partition).await
}

/// Which kind of Raft group a key names: a partition's or a coordinator shard's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    Partition,
    Shard,
}

/// Stand for election in this broker's replica of group `key` now, unless it heals a damaged
/// Raft log (`replica::heal`).
async fn elect_here(node: &ClusterNode, key: &GroupKey, kind: GroupKind) -> Result<(), String> {
    let missing = || format!("no replica of {}-{} here", key.0, key.1);
    let healing = || format!("{}-{}: healing a damaged Raft log", key.0, key.1);
    match kind {
        GroupKind::Partition => {
            let rep = node.replica(key).ok_or_else(missing)?;
            if rep.is_healing() {
                return Err(healing());
            }
            // stands with what its leader committed (stands anyway after the wait: no leader,
            // or one that sends nothing, is no reason to refuse)
            rep.caught_up_with_leader(STAND_CATCH_UP).await;
            rep.raft.trigger().elect().await.map_err(|e| e.to_string())
        }
        GroupKind::Shard => {
            let rep = node.shard_replica(key).ok_or_else(missing)?;
            if rep.is_healing() {
                return Err(healing());
            }
            rep.raft.trigger().elect().await.map_err(|e| e.to_string())
        }
    }
}

/// How long a partition replica asked to stand waits to catch up with its leader first
/// (`Replica::caught_up_with_leader`): four heartbeats (decision 0041: every 500 ms).
const STAND_CATCH_UP: Duration = Duration::from_secs(2);

/// Ask broker `target` to stand for election in group `key`.
async fn elect_in(node: &ClusterNode, target: NodeId, key: GroupKey, kind: GroupKind) -> anyhow::Result<()> {
    if target == node.node_id {
        return elect_here(node, &key, kind).await.map_err(|e| anyhow::anyhow!("{e}"));
    }
    let addr = node.addr_of(target).ok_or_else(|| anyhow::anyhow!("broker {target} has no Raft address"))?;
    let rpc = match kind {
        GroupKind::Partition => Rpc::PartElect(key),
        GroupKind::Shard => Rpc::ShardElect(key),
    };
    let mut conn = None;
    let answer: Result<(), String> = exchange(&mut conn, &addr, rpc, Duration::from_secs(5)).await?;
    answer.map_err(|e| anyhow::anyhow!("broker {target}: {e}"))
}

/// A group's other replicas as its repair reaches them (`mend.rs`): over each one's cluster
/// port. A partition's group asks for copies of batches ([`super::mend::Peers`]), a
/// coordinator shard's for live records ([`super::mend::ShardPeers`]).
pub struct GroupPeers {
    pub node: std::sync::Weak<ClusterNode>,
    pub key: GroupKey,
    pub kind: GroupKind,
    /// The replicas the metadata image assigns the group: asked while this broker's replica is
    /// not running (a damaged replica whose Raft log is its partition log repairs it before it
    /// starts).
    pub assigned: Vec<NodeId>,
}

impl GroupPeers {
    /// The group's voters other than this broker (the assigned replicas while this broker's
    /// replica is not running), and this broker's node.
    fn others(&self) -> Option<(Arc<ClusterNode>, Vec<NodeId>)> {
        let node = self.node.upgrade()?;
        let metrics = match self.kind {
            GroupKind::Partition => node.replica(&self.key).map(|r| r.raft.metrics()),
            GroupKind::Shard => node.shard_replica(&self.key).map(|r| r.raft.metrics()),
        };
        let voters: Vec<NodeId> = match metrics {
            Some(m) => m.borrow().membership_config.voter_ids().filter(|v| *v != node.node_id).collect(),
            None => self.assigned.iter().copied().filter(|v| *v != node.node_id).collect(),
        };
        Some((node, voters))
    }

    /// Each other voter's answer to `rpc`.
    fn ask<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        rpc: impl Fn() -> Rpc + Send + 'static,
    ) -> super::mend::BoxFuture<Vec<(NodeId, Result<T, String>)>> {
        let others = self.others();
        Box::pin(async move {
            let Some((node, voters)) = others else { return Vec::new() };
            let mut out = Vec::new();
            for v in voters {
                let Some(addr) = node.addr_of(v) else {
                    out.push((v, Err("no Raft address".to_string())));
                    continue;
                };
                let mut conn = None;
                let answer: Result<T, String> = match exchange(&mut conn, &addr, rpc(), Duration::from_secs(5)).await {
                    Ok(a) => a,
                    Err(e) => Err(e.to_string()),
                };
                out.push((v, answer));
            }
            out
        })
    }

    /// Ask the other voters to lead instead of this replica, one after another, until one does.
    fn hand_over_now(&self) -> super::mend::BoxFuture<()> {
        let others = self.others();
        let (key, kind) = (self.key.clone(), self.kind);
        Box::pin(async move {
            let Some((node, voters)) = others else { return };
            for v in voters {
                if let Err(e) = elect_in(&node, v, key.clone(), kind).await {
                    tracing::debug!("hand over {}-{} to broker {v}: {e}", key.0, key.1);
                    continue;
                }
                let me = node.node_id;
                let wait = match kind {
                    GroupKind::Partition => node.replica(&key).map(|r| r.raft.wait(Some(Duration::from_millis(500)))),
                    GroupKind::Shard => node.shard_replica(&key).map(|r| r.raft.wait(Some(Duration::from_millis(500)))),
                };
                let Some(wait) = wait else { return };
                if wait.metrics(|m| m.current_leader != Some(me), "handed over").await.is_ok() {
                    tracing::info!(
                        "{}-{}: leadership handed to another replica while this one is damaged",
                        key.0,
                        key.1
                    );
                    return;
                }
            }
        })
    }
}

impl super::mend::Peers for GroupPeers {
    fn copies(&self, offset: i64) -> super::mend::BoxFuture<super::mend::Copies> {
        let key = self.key.clone();
        self.ask(move || Rpc::PartCopy(key.clone(), offset))
    }

    fn hand_over(&self) -> super::mend::BoxFuture<()> {
        self.hand_over_now()
    }

    fn formats(&self) -> super::mend::BoxFuture<super::mend::Formats> {
        let key = self.key.clone();
        self.ask(move || Rpc::PartFormat(key.clone()))
    }

    fn held(&self) -> super::mend::BoxFuture<super::mend::Held> {
        let key = self.key.clone();
        self.ask(move || Rpc::PartHeld(key.clone()))
    }
}

impl super::mend::ShardPeers for GroupPeers {
    fn copies(&self) -> super::mend::BoxFuture<super::mend::KvCopies> {
        let key = self.key.clone();
        self.ask(move || Rpc::ShardCopy(key.clone()))
    }

    fn hand_over(&self) -> super::mend::BoxFuture<()> {
        self.hand_over_now()
    }
}

/// A Kafka request frame (without its size prefix) to the broker whose cluster port is `addr`,
/// on `conn` (opened if needed, dropped if the exchange fails): its response frame.
pub async fn kafka(conn: &mut Option<Conn>, addr: &str, frame: Vec<u8>, ttl: Duration) -> anyhow::Result<Vec<u8>> {
    let answer: Result<Vec<u8>, String> = exchange(conn, addr, Rpc::Kafka(frame), ttl).await?;
    answer.map_err(|e| anyhow::anyhow!("{addr}: {e}"))
}

/// Send a metadata write to the leader at `addr`.
pub async fn forward(addr: &str, cmd: &Command) -> anyhow::Result<CommandResult> {
    let mut conn = None;
    let answer: Result<CommandResult, String> =
        exchange(&mut conn, addr, Rpc::Forward(cmd.clone()), Duration::from_secs(5)).await?;
    answer.map_err(|e| anyhow::anyhow!("leader at {addr}: {e}"))
}

/// The group and committed leader an append names.
fn carried_by(rpc: &Rpc) -> Option<Carried> {
    let leader = |v: &openraft::Vote<NodeId>| v.is_committed().then(|| v.leader_id().voted_for()).flatten();
    match rpc {
        Rpc::Append(r) => leader(&r.vote).map(Carried::Metadata),
        Rpc::PartAppend(g, r) => leader(&r.vote).map(|l| Carried::Partition(g.clone(), l)),
        Rpc::ShardAppend(g, r) => leader(&r.vote).map(|l| Carried::Shard(g.clone(), l)),
        _ => None,
    }
}

/// Serve Raft RPCs from peers.
pub async fn serve(listener: tokio::net::TcpListener, node: Arc<ClusterNode>) {
    loop {
        let Ok((socket, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let node = node.clone();
        tokio::spawn(async move {
            let _ = socket.set_nodelay(true);
            let socket: Conn = match PEER_TLS.get() {
                None => Box::new(socket),
                // a peer without a certificate the truststore vouches for gets no further
                Some(tls) => match tokio::time::timeout(Duration::from_secs(10), tls.acceptor.accept(socket)).await {
                    Ok(Ok(s)) => Box::new(s),
                    Ok(Err(e)) => {
                        tracing::warn!(%peer, "Raft connection refused: TLS handshake failed: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "Raft connection refused: no TLS handshake within 10 s");
                        return;
                    }
                },
            };
            if let Some(carried) = serve_connection(socket, peer, |rpc| Box::pin(answer_rpc(node.clone(), rpc))).await {
                super::failover::connection_ended(node, carried);
            }
        });
    }
}

/// One peer's connection. Its RPCs are read in order, each started (`answer`) before the next is
/// read, so a peer's appends are queued for their group's Raft core in the order they came: a
/// leader sends several without waiting (`GroupPeer`), and they are read while the ones before
/// them wait for their entries to be on disk. The answers are written in the order the requests
/// came, each once it is ready. Returns, when the peer ended the connection, the group and
/// leader whose appends it carried last (that leader may be gone, `failover`).
async fn serve_connection(socket: Conn, peer: std::net::SocketAddr, answer: impl Fn(Rpc) -> Answer) -> Option<Carried> {
    let (mut reading, mut writing) = tokio::io::split(socket);
    let (queue, mut queued) = tokio::sync::mpsc::unbounded_channel::<Answer>();
    let read = async move {
        let mut carried: Option<Carried> = None;
        loop {
            let Ok(frame) = read_frame(&mut reading).await else { return carried };
            // the batches an append carries stay in the frame's memory (decision 0062)
            let frame = bytes::Bytes::from(frame);
            let rpc: Rpc = match decode_sharing(&frame, |f| bincode::deserialize(f)) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(%peer, "bad Raft RPC: {e}; closing");
                    return None;
                }
            };
            if let Some(c) = carried_by(&rpc) {
                carried = Some(c);
            }
            // its first step now, before the next frame is read (an append: queued for its
            // group's core)
            let mut answer = answer(rpc);
            let first = std::future::poll_fn(|cx| std::task::Poll::Ready(answer.as_mut().poll(cx))).await;
            if let std::task::Poll::Ready(a) = first {
                answer = Box::pin(std::future::ready(a));
            }
            if queue.send(answer).is_err() {
                return None;
            }
        }
    };
    let write = async move {
        while let Some(answer) = queued.recv().await {
            // no answer: the connection closes (the caller sees it)
            let Some(answer) = answer.await else { return };
            if write_frame(&mut writing, &answer).await.is_err() {
                return;
            }
        }
    };
    // (either ending ends the connection)
    tokio::select! {
        carried = read => carried,
        _ = write => None,
    }
}

/// A request's answer to come (`None`: close the connection without one).
type Answer = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Vec<u8>>> + Send>>;

/// A candidate's vote request answered by `raft`, the answer noted in `ballots`.
async fn vote_in<C>(
    raft: &openraft::Raft<C>,
    ballots: &super::replica::Ballots,
    r: VoteRequest<NodeId>,
) -> bincode::Result<Vec<u8>>
where
    C: openraft::RaftTypeConfig<NodeId = NodeId, Node = BasicNode>,
{
    let (candidate, their_log) = (r.vote.leader_id().node_id, r.last_log_id);
    let answer = raft.vote(r).await;
    ballots.answered(candidate, their_log, &answer);
    bincode::serialize(&answer)
}

/// The answer to one RPC from a peer.
async fn answer_rpc(node: Arc<ClusterNode>, rpc: Rpc) -> Option<Vec<u8>> {
    let answer = match rpc {
        Rpc::Append(r) => bincode::serialize(&node.raft.append_entries(r).await),
        Rpc::Vote(r) => vote_in(&node.raft, &node.metadata_ballots, r).await,
        Rpc::Snapshot(r) => bincode::serialize(&node.raft.install_snapshot(r).await),
        Rpc::PartAppend(g, r) => match node.replica(&g) {
            Some(rep) => {
                let answer = rep.raft.append_entries(r).await;
                rep.appends_taken.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                bincode::serialize(&answer)
            }
            None => return None, // not (yet) a replica here: the caller sees a network error
        },
        // a replica healing a damaged Raft log does not vote (`replica::heal`): the
        // candidate sees no answer
        Rpc::PartVote(g, r) => match node.replica(&g) {
            Some(rep) if !rep.is_healing() => vote_in(&rep.raft, &rep.ballots, r).await,
            _ => return None,
        },
        Rpc::PartSnapshot(g, r) => match node.replica(&g) {
            Some(rep) => bincode::serialize(&rep.raft.install_snapshot(r).await),
            None => return None,
        },
        Rpc::ShardAppend(g, r) => match node.shard_replica(&g) {
            Some(rep) => bincode::serialize(&rep.raft.append_entries(r).await),
            None => return None,
        },
        Rpc::ShardVote(g, r) => match node.shard_replica(&g) {
            Some(rep) if !rep.is_healing() => vote_in(&rep.raft, &rep.ballots, r).await,
            _ => return None,
        },
        Rpc::ShardSnapshot(g, r) => match node.shard_replica(&g) {
            Some(rep) => bincode::serialize(&rep.raft.install_snapshot(r).await),
            None => return None,
        },
        Rpc::PartElect(g) => bincode::serialize(&elect_here(&node, &g, GroupKind::Partition).await),
        Rpc::ShardElect(g) => bincode::serialize(&elect_here(&node, &g, GroupKind::Shard).await),
        Rpc::Join(id, addr) => {
            let r: Result<(), String> = node.add_broker(id, &addr).await.map_err(|e| e.to_string());
            bincode::serialize(&r)
        }
        Rpc::Leave(id) => {
            let r: Result<(), String> = node.remove_broker(id).await.map_err(|e| e.to_string());
            bincode::serialize(&r)
        }
        Rpc::DropFromCoordinators(id) => {
            let r: Result<(), String> = node.drop_from_coordinators(id).await.map_err(|e| e.to_string());
            bincode::serialize(&r)
        }
        Rpc::PartCopy(g, offset) => {
            let r: Result<Vec<u8>, String> = match node.replica(&g).and_then(|r| r.partition_log()) {
                Some(p) => tokio::task::spawn_blocking(move || p.copy_of(offset))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map(|b| b.to_vec()).map_err(|e| e.to_string())),
                None => Err(format!("no replica of {}-{} here", g.0, g.1)),
            };
            bincode::serialize(&r)
        }
        Rpc::PartFormat(g) => {
            let r: Result<Option<bool>, String> =
                Ok(node.replica(&g).and_then(|r| super::replica::log_format_of(&r.dir)));
            bincode::serialize(&r)
        }
        Rpc::PartHeld(g) => {
            let dir = node.replica(&g).map(|r| r.dir.clone()).or_else(|| node.replica_dir(&g));
            let r: Result<bool, String> = Ok(dir.is_some_and(|d| super::replica::held_past_birth(&d)));
            bincode::serialize(&r)
        }
        Rpc::ShardCopy(g) => {
            let r: Result<(u64, Vec<KvEntry>), String> = match node.shard_replica(&g).and_then(|r| r.kv_mender()) {
                Some(m) => {
                    tokio::task::spawn_blocking(move || m.gate.copy()).await.map_err(|e| e.to_string()).and_then(|r| r)
                }
                None => Err(format!("no replica of {}-{} here", g.0, g.1)),
            };
            bincode::serialize(&r)
        }
        Rpc::Kafka(frame) => {
            let answer: Result<Vec<u8>, String> = match node.kafka.get() {
                Some(handle) => handle(frame).await.ok_or_else(|| "not answerable".to_string()),
                None => Err("this broker does not answer Kafka calls yet".into()),
            };
            bincode::serialize(&answer)
        }
        Rpc::Forward(c) => {
            let r: Result<CommandResult, String> =
                match tokio::time::timeout(Duration::from_secs(5), node.raft.client_write(c)).await {
                    Ok(r) => r.map(|r| r.data).map_err(|e| e.to_string()),
                    Err(_) => Err("no majority answered within 5 s".into()),
                };
            bincode::serialize(&r)
        }
    };
    answer.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of any size (an append's carry megabytes) read back whole; a frame cut short is
    /// an error, not a shorter frame; one over the limit is refused before its body.
    #[tokio::test]
    async fn frames_of_every_size_read_back_and_a_cut_one_is_an_error() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let bodies: Vec<Vec<u8>> =
            [0usize, 1, 4096, 3 << 20].iter().map(|n| (0..*n).map(|i| (i % 251) as u8).collect()).collect();
        let sent = bodies.clone();
        let writer = tokio::spawn(async move {
            for body in &sent {
                write_frame(&mut a, body).await.expect("write");
            }
            // a frame of 10 bytes with 3 sent, then the end
            a.write_all(&10u32.to_be_bytes()).await.expect("write");
            a.write_all(&[1, 2, 3]).await.expect("write");
        });
        for body in &bodies {
            assert_eq!(&read_frame(&mut b).await.expect("read"), body);
        }
        writer.await.expect("writer");
        assert!(read_frame(&mut b).await.is_err(), "a frame cut short");
        let mut over = std::io::Cursor::new(((FRAME_MAX + 1) as u32).to_be_bytes().to_vec());
        let e = read_frame(&mut over).await.expect_err("a frame over the limit");
        assert!(e.to_string().contains("over the limit"), "refused for its length, not its missing body: {e}");
    }

    /// A peer that answers each `Leave(n)` with `n`, the first one only after 300 ms.
    async fn slow_first_answer() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let mut first = true;
            loop {
                let Ok((mut s, _)) = listener.accept().await else { return };
                let delay = std::mem::take(&mut first);
                tokio::spawn(async move {
                    let mut delay = delay;
                    while let Ok(frame) = read_frame(&mut s).await {
                        let Ok(Rpc::Leave(n)) = bincode::deserialize(&frame) else { return };
                        if std::mem::take(&mut delay) {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        let answer = bincode::serialize(&Ok::<u64, String>(n)).expect("encode");
                        if write_frame(&mut s, &answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    /// openraft bounds an append by its own timer and drops the future when it runs out: the
    /// next exchange must not read the dropped one's answer as its own.
    #[tokio::test]
    async fn an_exchange_cancelled_midway_leaves_no_answer_for_the_next() {
        let addr = slow_first_answer().await;
        let mut conn = None;
        let cancelled = tokio::time::timeout(
            Duration::from_millis(100),
            exchange::<Result<u64, String>>(&mut conn, &addr, Rpc::Leave(1), Duration::from_secs(5)),
        )
        .await;
        assert!(cancelled.is_err(), "the first exchange was meant to be cancelled: {cancelled:?}");
        for n in 2..5 {
            let answer: Result<u64, String> =
                exchange(&mut conn, &addr, Rpc::Leave(n), Duration::from_secs(5)).await.expect("exchange");
            assert_eq!(answer, Ok(n), "exchange {n} read another request's answer");
        }
        assert!(conn.is_some(), "a completed exchange keeps its connection");
    }

    fn stored(index: u64, bytes: usize) -> openraft::Entry<PartConfig> {
        openraft::Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: openraft::EntryPayload::Normal(crate::replication::types::PartCommand::Stored {
                batch: bytes::Bytes::from(vec![7u8; bytes]),
            }),
        }
    }

    fn at(index: u64) -> Option<openraft::LogId<NodeId>> {
        Some(openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index))
    }

    /// An append's batches are not copied on either side (decision 0062): the frame the leader
    /// writes holds them as parts of their own (its bytes still exactly bincode's, after the
    /// length), written whole through a pipe that takes a little at a time; the follower's
    /// decode leaves each batch a slice of the frame it read. Outside `decode_sharing`, a
    /// decode copies (nothing else may come to hold a frame).
    #[tokio::test]
    async fn an_appends_batches_are_neither_copied_into_its_frame_nor_out_of_it() {
        use crate::replication::types::PartCommand::Stored;
        use openraft::EntryPayload::Normal;
        let batch_of = |e: &openraft::Entry<PartConfig>| match &e.payload {
            Normal(Stored { batch }) => batch.clone(),
            other => panic!("not a stored batch: {other:?}"),
        };
        let vote = openraft::Vote::new_committed(1, 1);
        let entries: Vec<_> = [(10, 3000), (11, 5), (12, 70_000)].iter().map(|(i, n)| stored(*i, *n)).collect();
        let batches: Vec<bytes::Bytes> = entries.iter().map(batch_of).collect();
        let req = AppendEntriesRequest::<PartConfig> { vote, prev_log_id: at(9), leader_commit: at(8), entries };
        let rpc = Rpc::PartAppend(("t".to_string(), 0), req);

        let parts = framed(&rpc).expect("frame");
        for b in &batches {
            let own = parts.iter().any(|p| p.as_ptr() == b.as_ptr() && p.len() == b.len());
            assert!(own, "a batch of {} bytes copied into the frame", b.len());
        }
        let body = bincode::serialize(&rpc).expect("encode");
        let whole = parts.concat();
        assert_eq!((&whole[..4], &whole[4..]), (&(body.len() as u32).to_be_bytes()[..], &body[..]));

        let (mut a, mut b) = tokio::io::duplex(1000);
        let writer = tokio::spawn(async move { write_parts(&mut a, parts).await });
        let frame = bytes::Bytes::from(read_frame(&mut b).await.expect("read"));
        writer.await.expect("writer").expect("write");
        assert_eq!(&frame[..], &body[..]);

        let within = |batch: &bytes::Bytes| {
            let at = batch.as_ptr() as usize;
            (frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len()).contains(&at)
        };
        let Ok(Rpc::PartAppend(_, shared)) = decode_sharing(&frame, |f| bincode::deserialize::<Rpc>(f)) else {
            panic!("not decoded as an append")
        };
        for (e, want) in shared.entries.iter().zip(&batches) {
            let got = batch_of(e);
            assert_eq!(&got, want);
            assert!(within(&got), "a batch of {} bytes copied out of its frame", got.len());
        }
        let Ok(Rpc::PartAppend(_, copied)) = bincode::deserialize::<Rpc>(&frame) else { panic!("not decoded") };
        assert!(copied.entries.iter().map(batch_of).all(|b| !within(&b)));
    }

    /// An append split to be pipelined: appends of at most the bound (an entry over it alone),
    /// each following the one before it, every entry once and in order, each with the leader's
    /// vote and commit point; a heartbeat stays one append.
    #[test]
    fn an_append_splits_into_appends_that_follow_each_other() {
        let vote = openraft::Vote::new_committed(1, 1);
        let sizes = [(10, 400), (11, 400), (12, 1500), (13, 100), (14, 100)];
        let entries = sizes.iter().map(|(i, n)| stored(*i, *n)).collect();
        let rpc = AppendEntriesRequest::<PartConfig> { vote, prev_log_id: at(9), leader_commit: at(8), entries };
        let appends = split_append(rpc, 1000);
        let shape: Vec<(Option<u64>, Vec<u64>)> = appends
            .iter()
            .map(|a| (a.prev_log_id.map(|l| l.index), a.entries.iter().map(|e| e.log_id.index).collect()))
            .collect();
        assert_eq!(shape, vec![(Some(9), vec![10, 11]), (Some(11), vec![12]), (Some(12), vec![13, 14])]);
        assert!(appends.iter().all(|a| a.vote == vote && a.leader_commit == at(8)));
        let heartbeat =
            AppendEntriesRequest::<PartConfig> { vote, prev_log_id: at(9), leader_commit: at(8), entries: vec![] };
        let one = split_append(heartbeat, 1000);
        assert_eq!((one.len(), one[0].prev_log_id, one[0].entries.len()), (1, at(9), 0));
    }

    /// Entries the follower took from the same leader in an append answered late are not sent
    /// again: the rest follow what it took; all of them taken, a heartbeat at the last one
    /// (its success tells openraft the follower holds it). An append that starts past what it
    /// took, and a heartbeat, go as they are.
    #[test]
    fn what_a_follower_took_late_is_not_sent_again() {
        let vote = openraft::Vote::new_committed(1, 1);
        let append = |prev: u64, entries: std::ops::RangeInclusive<u64>| AppendEntriesRequest::<PartConfig> {
            vote,
            prev_log_id: at(prev),
            leader_commit: at(3),
            entries: entries.map(|i| stored(i, 10)).collect(),
        };
        let shape = |a: AppendEntriesRequest<PartConfig>| {
            (
                a.prev_log_id.map(|l| l.index),
                a.entries.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
                a.leader_commit,
            )
        };
        let took = |i| at(i).expect("log id");
        assert_eq!(shape(trim_append(append(4, 5..=10), took(7))), (Some(7), vec![8, 9, 10], at(3)));
        assert_eq!(shape(trim_append(append(4, 5..=10), took(10))), (Some(10), vec![], at(3)));
        assert_eq!(shape(trim_append(append(4, 5..=10), took(12))), (Some(10), vec![], at(3)));
        assert_eq!(shape(trim_append(append(4, 5..=10), took(4))), (Some(4), (5..=10).collect(), at(3)));
        assert_eq!(shape(trim_append(append(8, 9..=10), took(7))), (Some(8), vec![9, 10], at(3)));
        let heartbeat = AppendEntriesRequest { entries: Vec::new(), ..append(4, 5..=5) };
        assert_eq!(shape(trim_append(heartbeat, took(7))), (Some(4), vec![], at(3)));
    }

    /// Each append a follower got: its previous entry's index and its entries' indexes.
    type Seen = Arc<std::sync::Mutex<Vec<(Option<u64>, Vec<u64>)>>>;

    /// A follower that answers each append as `answer` says (from its previous entry's index),
    /// the appends on its first connection only after 700 ms; and the appends it got.
    async fn late_follower(answer: fn(Option<u64>) -> AppendEntriesResponse<NodeId>) -> (String, Seen) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let seen = Seen::default();
        let log = seen.clone();
        tokio::spawn(async move {
            let mut first = true;
            loop {
                let Ok((mut s, _)) = listener.accept().await else { return };
                let (log, slow) = (log.clone(), std::mem::take(&mut first));
                tokio::spawn(async move {
                    while let Ok(frame) = read_frame(&mut s).await {
                        let Ok(Rpc::PartAppend(_, r)) = bincode::deserialize(&frame) else { return };
                        let prev = r.prev_log_id.map(|l| l.index);
                        log.lock().expect("log").push((prev, r.entries.iter().map(|e| e.log_id.index).collect()));
                        if slow {
                            tokio::time::sleep(Duration::from_millis(700)).await;
                        }
                        let answer: AppendAnswer = Ok(answer(prev));
                        let answer = bincode::serialize(&answer).expect("encode");
                        if write_frame(&mut s, &answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, seen)
    }

    /// A leader's transport to the follower at `addr`; and the append openraft sends it
    /// (entries 5–8 after 4), whose first try times out there (`late_follower`).
    fn leader_of(addr: String) -> (GroupPeer<PartConfig>, impl Fn() -> AppendEntriesRequest<PartConfig>) {
        let peer = GroupPeer::<PartConfig> {
            group: ("t".into(), 0),
            peer: Peer { target: 2, addr, conn: None },
            chunk_bytes: 1 << 20,
            answering: None,
            flight: None,
            took: None,
            kind: std::marker::PhantomData,
        };
        let vote = openraft::Vote::new_committed(1, 1);
        let append = move || AppendEntriesRequest::<PartConfig> {
            vote,
            prev_log_id: at(4),
            leader_commit: at(4),
            entries: (5..=8).map(|i| stored(i, 100)).collect(),
        };
        (peer, append)
    }

    /// A follower that answers an append after openraft's deadline (stopped most of the time,
    /// or on a loaded machine) is not sent the same entries again on a new connection while it
    /// still writes them — each resend was more work for the follower least able to do it
    /// (decision 0061). The next append reads the late answer first, and sends only what the
    /// follower does not hold: here nothing, so a heartbeat at the last entry.
    #[tokio::test]
    async fn a_late_answer_is_read_before_the_next_append_and_what_it_took_is_not_sent_again() {
        let (addr, seen) = late_follower(|_| AppendEntriesResponse::Success).await;
        let (mut peer, append) = leader_of(addr);
        // (openraft's limit: its soft part, 375 ms, bounds the exchange)
        let first = peer.append_entries(append(), RPCOption::new(Duration::from_millis(500))).await;
        assert!(first.is_err(), "answered after the deadline: {first:?}");
        // openraft sends the same entries again
        let second = peer.append_entries(append(), RPCOption::new(Duration::from_secs(2))).await;
        assert_eq!(second.ok(), Some(AppendEntriesResponse::Success));
        let seen = seen.lock().expect("log").clone();
        assert_eq!(seen, vec![(Some(4), vec![5, 6, 7, 8]), (Some(8), vec![])], "what the follower was sent");
    }

    /// A follower that took entries late and then lost them within the leader's term (wiped
    /// and restarted) refuses the trimmed append: that is not a conflict at the point openraft
    /// sent from (at none, openraft's replication would stop on it), so openraft is told of a
    /// failure, what the follower took is forgotten, and the append goes again whole.
    #[tokio::test]
    async fn a_follower_that_lost_what_it_took_late_is_sent_it_again_whole() {
        // (wiped after its first answer: it holds entries up to 4 only)
        let (addr, seen) = late_follower(|prev| match prev {
            Some(p) if p > 4 => AppendEntriesResponse::Conflict,
            _ => AppendEntriesResponse::Success,
        })
        .await;
        let (mut peer, append) = leader_of(addr);
        let first = peer.append_entries(append(), RPCOption::new(Duration::from_millis(500))).await;
        assert!(first.is_err(), "answered after the deadline: {first:?}");
        let second = peer.append_entries(append(), RPCOption::new(Duration::from_secs(2))).await;
        assert!(matches!(second, Err(RPCError::Network(_))), "a refused trimmed append is a failure: {second:?}");
        let third = peer.append_entries(append(), RPCOption::new(Duration::from_secs(2))).await;
        assert_eq!(third.ok(), Some(AppendEntriesResponse::Success));
        let seen = seen.lock().expect("log").clone();
        let whole = (Some(4), vec![5, 6, 7, 8]);
        assert_eq!(seen, vec![whole.clone(), (Some(8), vec![]), whole], "what the follower was sent");
    }

    /// The answers to a split append join into what the follower took: up to the first append
    /// it refused or did not answer; the first one's refusal or failure is the answer.
    #[test]
    #[allow(clippy::result_large_err)] // openraft's error type
    fn answers_to_a_split_append_join_into_what_the_follower_took() {
        type Answer = Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>>;
        let lasts = [at(11), at(12), at(14)];
        let ok = || -> Answer { Ok(AppendEntriesResponse::Success) };
        let refused = || -> Answer { Ok(AppendEntriesResponse::Conflict) };
        let cut = || RPCError::Network(NetworkError::new(&std::io::Error::other("cut")));
        let joined = |answers: Vec<Answer>, stopped| joined_answer(answers, stopped, &lasts).ok();
        assert_eq!(joined(vec![ok(), ok(), ok()], None), Some(AppendEntriesResponse::Success));
        assert_eq!(joined(vec![ok(), refused(), refused()], None), Some(AppendEntriesResponse::PartialSuccess(at(11))));
        assert_eq!(joined(vec![ok(), ok()], Some(cut())), Some(AppendEntriesResponse::PartialSuccess(at(12))));
        assert_eq!(joined(vec![refused(), refused(), refused()], None), Some(AppendEntriesResponse::Conflict));
        let higher = openraft::Vote::new(2, 2);
        let answers = vec![ok(), Ok(AppendEntriesResponse::HigherVote(higher)), refused()];
        assert_eq!(joined(answers, None), Some(AppendEntriesResponse::HigherVote(higher)));
        assert!(matches!(joined_answer(Vec::<Answer>::new(), Some(cut()), &lasts), Err(RPCError::Network(_))));
    }

    /// Requests sent one after the other without waiting (`exchange_pipelined`) are each started
    /// by the peer before it reads the next (`serve_connection`), and answered in the order they
    /// came even when a later one is ready first. Here no answer is ready until all three
    /// requests have been read, and the first is ready last: a side that waits for an answer
    /// before the next request never gets one.
    #[tokio::test]
    async fn pipelined_requests_are_read_ahead_and_answered_in_order() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let (s, peer) = listener.accept().await.expect("accept");
            let started = Arc::new(tokio::sync::watch::Sender::new(0usize));
            serve_connection(Box::new(s), peer, move |rpc| {
                let Rpc::Leave(n) = rpc else { return Box::pin(async { None }) };
                started.send_modify(|c| *c += 1);
                let mut started = started.subscribe();
                Box::pin(async move {
                    let _ = started.wait_for(|c| *c == 3).await;
                    if n == 0 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    bincode::serialize(&Ok::<u64, String>(n)).ok()
                })
            })
            .await;
        });
        let (mut conn, mut answers) = (None, Vec::<Result<u64, String>>::new());
        let rpcs = vec![Rpc::Leave(0), Rpc::Leave(1), Rpc::Leave(2)];
        exchange_pipelined(&mut conn, &addr, rpcs, Duration::from_secs(5), &mut answers)
            .await
            .expect("all three answered");
        assert_eq!(answers, vec![Ok(0), Ok(1), Ok(2)]);
        assert!(conn.is_some(), "the connection is kept for the next exchange");
    }
}
