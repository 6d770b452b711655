//! The collectives of the MPI communicator (all-reduce, reduce-scatter, all-gather,
//! broadcast, split): each copies into staging buffers, runs one or two non-blocking MPI
//! operations and copies the result out.

use crate::comm::{MpiComm, Scratch};
use crate::raw::{Comm, datatype, null_request, u64_type, view};
use ::mpi::ffi;
use boost_comm::CommResult;
use boost_comm::Communicator;
use boost_comm::backend::CallDesc;
use boost_comm::backend::combine_into;
use boost_comm::{CommElem, DType, Kind};
use boost_tensor::{Label, ReduceOp};
use std::os::raw::{c_int, c_void};
use std::time::Instant;

/// The elements each rank contributes to an exchange, as MPI counts them.
#[derive(Clone, Copy)]
struct PerRank {
    count: c_int,
    dt: ffi::MPI_Datatype,
}

/// The two MPI exchanges of `count` elements to or from every rank.
#[derive(Clone, Copy)]
enum Exchange {
    /// `MPI_Ialltoall`: chunk j of the send buffer goes to rank j.
    AllToAll,
    /// `MPI_Iallgather`: the send buffer (one chunk) goes to every rank.
    AllGather,
}

impl MpiComm {
    /// Run `ex` of `per` elements per rank from `send` into `recv` (chunk j from rank j) and
    /// wait for it.
    ///
    /// # Safety
    /// `send` holds `count` (all-gather) or p·`count` (all-to-all) elements, `recv` p·`count`,
    /// and both are staging buffers of this communicator: an operation given up at its
    /// deadline stays pending on them.
    unsafe fn exchange<T>(
        &self,
        desc: &CallDesc,
        ex: Exchange,
        send: &[T],
        recv: &mut [T],
        per: PerRank,
        start: Instant,
    ) -> CommResult<()> {
        let PerRank { count, dt } = per;
        let (s, r) = (send.as_ptr() as *const c_void, recv.as_mut_ptr() as *mut c_void);
        let what = match ex {
            Exchange::AllToAll => "MPI_Ialltoall",
            Exchange::AllGather => "MPI_Iallgather",
        };
        let mut req = [null_request()];
        // SAFETY: guaranteed by the caller; the request is waited for below.
        self.start(desc, what, || unsafe {
            match ex {
                Exchange::AllToAll => ffi::MPI_Ialltoall(s, count, dt, r, count, dt, self.comm.0, &mut req[0]),
                Exchange::AllGather => ffi::MPI_Iallgather(s, count, dt, r, count, dt, self.comm.0, &mut req[0]),
            }
        })?;
        self.wait(desc, what, &mut req, start)
    }

    /// The opening of a collective over `len` elements split into one chunk per rank
    /// (reduce-scatter, all-gather): the split is checked; with one rank there is nothing to
    /// do (None); otherwise the ranks' arrival is checked and the chunk length and its MPI
    /// count come back.
    fn open_chunked(
        &self,
        desc: &CallDesc,
        len: usize,
        c: &mut Vec<u64>,
        start: Instant,
    ) -> CommResult<Option<(usize, c_int)>> {
        let p = self.size;
        if !len.is_multiple_of(p) {
            return Err(self.invalid(desc, format!("{len} elements do not split into {p} chunks")));
        }
        if p == 1 {
            return Ok(None);
        }
        let n = len / p;
        let count = self.count(desc, n)?;
        self.count(desc, len)?;
        self.arrive(desc, c, start)?;
        Ok(Some((n, count)))
    }

    /// All-reduce by chunks: an all-to-all gives rank r chunk r of every rank's buffer, which
    /// it reduces in rank order 0..p−1; an all-gather returns the chunks. Every element is
    /// combined in the in-process backend's order.
    fn ordered_all_reduce<T: CommElem>(
        &self,
        desc: &CallDesc,
        buf: &mut [T],
        op: ReduceOp,
        s: &mut Scratch,
        start: Instant,
    ) -> CommResult<()> {
        let (p, n) = (self.size, buf.len());
        let c = n.div_ceil(p);
        let cc = self.count(desc, c)?;
        self.count(desc, p * c)?;
        let dt = datatype(T::DTYPE);
        let Scratch { a, b, .. } = s;
        let a = view::<T>(a, p * c);
        a[..n].copy_from_slice(buf);
        a[n..].fill(T::default());
        let b = view::<T>(b, p * c);
        // SAFETY: both scratch buffers hold p·c elements.
        unsafe { self.exchange(desc, Exchange::AllToAll, a, b, PerRank { count: cc, dt }, start) }?;
        let out = &mut a[..c];
        out.copy_from_slice(&b[..c]);
        for j in 1..p {
            combine_into(out, &b[j * c..(j + 1) * c], op);
        }
        // SAFETY: `a` holds this rank's c reduced elements, `b` p·c elements.
        unsafe { self.exchange(desc, Exchange::AllGather, &a[..c], b, PerRank { count: cc, dt }, start) }?;
        buf.copy_from_slice(&b[..n]);
        Ok(())
    }

    pub(crate) fn all_reduce_t<T: CommElem>(&self, buf: &mut [T], op: ReduceOp, label: Label) -> CommResult<()> {
        let mut desc = CallDesc::new(Kind::all_reduce(op), label).data(T::DTYPE, buf.len());
        desc.op = Some(op);
        self.call(desc, |s| {
            let start = Instant::now();
            if self.size == 1 {
                return Ok(());
            }
            let n = buf.len();
            let count = self.count(&desc, n)?;
            self.arrive(&desc, &mut s.c, start)?;
            let float_max = op == ReduceOp::Max && T::DTYPE != DType::U32;
            if self.opts.ordered || float_max {
                return self.ordered_all_reduce(&desc, buf, op, s, start);
            }
            let dt = datatype(T::DTYPE);
            // SAFETY: reads constants the MPI library initialised.
            let mop = unsafe {
                match op {
                    ReduceOp::Sum => ffi::RSMPI_SUM,
                    ReduceOp::Max => ffi::RSMPI_MAX,
                }
            };
            let Scratch { a, b, .. } = s;
            let a = view::<T>(a, n);
            a.copy_from_slice(buf);
            let b = view::<T>(b, n);
            let mut req = [null_request()];
            // SAFETY: both scratch buffers hold n elements and outlive the request.
            self.start(&desc, "MPI_Iallreduce", || unsafe {
                ffi::MPI_Iallreduce(
                    a.as_ptr() as *const c_void,
                    b.as_mut_ptr() as *mut c_void,
                    count,
                    dt,
                    mop,
                    self.comm.0,
                    &mut req[0],
                )
            })?;
            self.wait(&desc, "MPI_Iallreduce", &mut req, start)?;
            buf.copy_from_slice(b);
            Ok(())
        })
    }

    pub(crate) fn reduce_scatter_t<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::ReduceScatter, label).data(T::DTYPE, buf.len());
        self.call(desc, |s| {
            let start = Instant::now();
            let (p, me, len) = (self.size, self.rank, buf.len());
            let Some((n, count)) = self.open_chunked(&desc, len, &mut s.c, start)? else { return Ok(()) };
            let dt = datatype(T::DTYPE);
            let Scratch { a, b, .. } = s;
            let a = view::<T>(a, len);
            a.copy_from_slice(buf);
            if self.opts.ordered {
                let b = view::<T>(b, len);
                // SAFETY: both scratch buffers hold len = p·n elements.
                unsafe { self.exchange(&desc, Exchange::AllToAll, a, b, PerRank { count, dt }, start) }?;
                let out = &mut buf[me * n..(me + 1) * n];
                out.copy_from_slice(&b[..n]);
                for j in 1..p {
                    combine_into(out, &b[j * n..(j + 1) * n], ReduceOp::Sum);
                }
                return Ok(());
            }
            let b = view::<T>(b, n);
            let mut req = [null_request()];
            // SAFETY: reads a constant; the scratch buffers hold len and n elements and outlive
            // the request.
            self.start(&desc, "MPI_Ireduce_scatter_block", || unsafe {
                ffi::MPI_Ireduce_scatter_block(
                    a.as_ptr() as *const c_void,
                    b.as_mut_ptr() as *mut c_void,
                    count,
                    dt,
                    ffi::RSMPI_SUM,
                    self.comm.0,
                    &mut req[0],
                )
            })?;
            self.wait(&desc, "MPI_Ireduce_scatter_block", &mut req, start)?;
            buf[me * n..(me + 1) * n].copy_from_slice(b);
            Ok(())
        })
    }

    pub(crate) fn all_gather_t<T: CommElem>(&self, buf: &mut [T], label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::AllGather, label).data(T::DTYPE, buf.len());
        self.call(desc, |s| {
            let start = Instant::now();
            let (me, len) = (self.rank, buf.len());
            let Some((n, count)) = self.open_chunked(&desc, len, &mut s.c, start)? else { return Ok(()) };
            let Scratch { a, b, .. } = s;
            let a = view::<T>(a, n);
            a.copy_from_slice(&buf[me * n..(me + 1) * n]);
            let b = view::<T>(b, len);
            // SAFETY: the scratch buffers hold n and len = p·n elements.
            unsafe {
                self.exchange(&desc, Exchange::AllGather, a, b, PerRank { count, dt: datatype(T::DTYPE) }, start)
            }?;
            buf.copy_from_slice(b);
            Ok(())
        })
    }

    pub(crate) fn broadcast_t<T: CommElem>(&self, buf: &mut [T], root: usize, label: Label) -> CommResult<()> {
        let desc = CallDesc::new(Kind::Broadcast, label).data(T::DTYPE, buf.len()).peer(root);
        self.call(desc, |s| {
            let start = Instant::now();
            let (p, me, n) = (self.size, self.rank, buf.len());
            if root >= p {
                return Err(self.invalid(&desc, format!("root {root} is not a rank of a group of {p}")));
            }
            if p == 1 {
                return Ok(());
            }
            let count = self.count(&desc, n)?;
            self.arrive(&desc, &mut s.c, start)?;
            let a = view::<T>(&mut s.a, n);
            if me == root {
                a.copy_from_slice(buf);
            }
            let mut req = [null_request()];
            // SAFETY: the scratch buffer holds n elements and outlives the request.
            self.start(&desc, "MPI_Ibcast", || unsafe {
                ffi::MPI_Ibcast(
                    a.as_mut_ptr() as *mut c_void,
                    count,
                    datatype(T::DTYPE),
                    root as c_int,
                    self.comm.0,
                    &mut req[0],
                )
            })?;
            self.wait(&desc, "MPI_Ibcast", &mut req, start)?;
            if me != root {
                buf.copy_from_slice(a);
            }
            Ok(())
        })
    }

    pub(crate) fn split_t(&self, color: usize, key: usize) -> CommResult<Box<dyn Communicator>> {
        let mut desc = CallDesc::new(Kind::Split, Label::op("split"));
        desc.color = color;
        desc.key = key;
        self.call(desc, |s| {
            let start = Instant::now();
            let (Ok(c_color), Ok(c_key)) = (c_int::try_from(color), c_int::try_from(key)) else {
                return Err(self.invalid(&desc, "color and key must fit MPI's int".into()));
            };
            self.arrive(&desc, &mut s.c, start)?;
            // Every rank's (color, key), to know the new group's members.
            let p = self.size;
            let Scratch { a, b, .. } = s;
            let a = view::<u64>(a, 2);
            a.copy_from_slice(&[color as u64, key as u64]);
            let b = view::<u64>(b, 2 * p);
            // SAFETY: the scratch buffers hold 2 and 2p words.
            unsafe { self.exchange(&desc, Exchange::AllGather, a, b, PerRank { count: 2, dt: u64_type() }, start) }?;
            let mut same: Vec<(u64, usize)> =
                (0..p).filter(|&i| b[2 * i] == color as u64).map(|i| (b[2 * i + 1], i)).collect();
            same.sort_unstable();
            let members: Box<[usize]> = same.iter().map(|&(_, i)| self.members[i]).collect();
            let rank = same.iter().position(|&(_, i)| i == self.rank).expect("this rank has its own color");
            // Blocking, but every rank of the group has already arrived (the all-gather above).
            // SAFETY: reads a constant; the out-pointer is a valid local.
            let mut newcomm = unsafe { ffi::RSMPI_COMM_NULL };
            self.start(&desc, "MPI_Comm_split", || unsafe {
                ffi::MPI_Comm_split(self.comm.0, c_color, c_key, &mut newcomm)
            })?;
            let (mut r, mut n) = (0 as c_int, 0 as c_int);
            // SAFETY: `newcomm` is a valid communicator; the out-pointers are valid locals.
            self.proc.call(|| unsafe {
                ffi::MPI_Comm_rank(newcomm, &mut r);
                ffi::MPI_Comm_size(newcomm, &mut n);
            });
            let child = MpiComm::new(self.proc, Comm(newcomm), members, self.opts);
            if r as usize != rank || n as usize != child.size {
                return Err(self.invalid(
                    &desc,
                    format!("MPI_Comm_split gave rank {r} of {n}, expected rank {rank} of {}", child.size),
                ));
            }
            Ok(Box::new(child) as Box<dyn Communicator>)
        })
    }
}
