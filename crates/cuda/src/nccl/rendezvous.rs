//! [`Rendezvous`]: how the ranks of a new NCCL group learn the unique id that rank 0 makes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How the ranks of a new group learn NCCL's unique id (created by rank 0).
#[derive(Debug, Clone)]
pub enum Rendezvous {
    /// Rank 0 writes the id to this file (a temporary file, then a rename); the others wait
    /// for it. Use a fresh path per run on a file system every rank sees.
    File(PathBuf),
    /// Rank 0 listens on this address and sends the id to each of the other ranks.
    Tcp(SocketAddr),
    /// The id itself, from [`super::NcclGroup::unique_id`] on one rank, carried by any other
    /// channel (an MPI broadcast, or shared memory between threads).
    Id([u8; 128]),
}

/// Magic bytes that open a TCP rendezvous message.
const MAGIC: &[u8; 8] = b"BOOSTNCL";

impl Rendezvous {
    /// Rank 0 makes the id with `make_id` and hands it out; every rank returns it.
    /// (`NcclGroup::new` passes `NcclGroup::unique_id`.)
    pub fn exchange(
        &self,
        rank: usize,
        size: usize,
        timeout: Duration,
        make_id: impl FnOnce() -> Result<[u8; 128], String>,
    ) -> Result<[u8; 128], String> {
        match self {
            Rendezvous::Id(id) => Ok(*id),
            Rendezvous::File(path) => file_rendezvous(path, rank, timeout, make_id),
            Rendezvous::Tcp(addr) => tcp_rendezvous(*addr, rank, size, timeout, make_id),
        }
    }
}

fn file_rendezvous(
    path: &std::path::Path,
    rank: usize,
    timeout: Duration,
    make_id: impl FnOnce() -> Result<[u8; 128], String>,
) -> Result<[u8; 128], String> {
    if rank == 0 {
        let id = make_id()?;
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        std::fs::write(&tmp, id).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("renaming to {}: {e}", path.display()))?;
        return Ok(id);
    }
    let t0 = Instant::now();
    loop {
        if let Ok(b) = std::fs::read(path)
            && b.len() == 128
        {
            return Ok(b.try_into().unwrap());
        }
        if t0.elapsed() > timeout {
            return Err(format!("rank {rank}: no NCCL id at {} after {timeout:?}", path.display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tcp_rendezvous(
    addr: SocketAddr,
    rank: usize,
    size: usize,
    timeout: Duration,
    make_id: impl FnOnce() -> Result<[u8; 128], String>,
) -> Result<[u8; 128], String> {
    let t0 = Instant::now();
    if rank == 0 {
        let id = make_id()?;
        let listener = TcpListener::bind(addr).map_err(|e| format!("rank 0: listening on {addr}: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let mut sent = 0;
        while sent + 1 < size {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(|e| e.to_string())?;
                    let mut msg = MAGIC.to_vec();
                    msg.extend_from_slice(&(size as u32).to_le_bytes());
                    msg.extend_from_slice(&id);
                    s.write_all(&msg).map_err(|e| format!("rank 0: sending the NCCL id: {e}"))?;
                    sent += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if t0.elapsed() > timeout {
                        return Err(format!("rank 0: {sent} of {} ranks reached {addr} within {timeout:?}", size - 1));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(format!("rank 0: accepting on {addr}: {e}")),
            }
        }
        return Ok(id);
    }
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(mut s) => {
                let mut msg = [0u8; 8 + 4 + 128];
                s.read_exact(&mut msg).map_err(|e| format!("rank {rank}: reading the NCCL id from {addr}: {e}"))?;
                if &msg[..8] != MAGIC {
                    return Err(format!("rank {rank}: {addr} is not a BOOST rendezvous"));
                }
                let n = u32::from_le_bytes(msg[8..12].try_into().unwrap()) as usize;
                if n != size {
                    return Err(format!("rank {rank}: the group at {addr} has {n} ranks, this rank expects {size}"));
                }
                return Ok(msg[12..].try_into().unwrap());
            }
            Err(e) => {
                if t0.elapsed() > timeout {
                    return Err(format!("rank {rank}: cannot reach rank 0 at {addr} within {timeout:?}: {e}"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
