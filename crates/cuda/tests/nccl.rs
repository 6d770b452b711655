//! NCCL groups: the rendezvous (runs anywhere); a group of one rank, and a rank left alone by
//! its peer (one GPU); groups of every GPU of the machine (two or more GPUs; skipped
//! otherwise), with blocking and started calls.
#![cfg(feature = "cuda")]

use boost_cuda::{Cuda, NcclGroup, Precision, Rendezvous};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut, ReduceOp};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn fake_id(seed: u8) -> Result<[u8; 128], String> {
    Ok(std::array::from_fn(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)))
}

/// Every rank of a TCP and of a file rendezvous learns rank 0's id (no NCCL needed).
#[test]
fn rendezvous_hands_rank_zeros_id_to_every_rank() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let dir = std::env::temp_dir().join(format!("boost-nccl-rv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for rv in [Rendezvous::Tcp(addr), Rendezvous::File(dir.join("id")), Rendezvous::Id(fake_id(3).unwrap())] {
        let size = 4;
        let ids: Vec<[u8; 128]> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..size)
                .map(|r| {
                    let rv = rv.clone();
                    s.spawn(move || rv.exchange(r, size, T, || fake_id(3)).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for id in &ids {
            assert_eq!(*id, fake_id(3).unwrap(), "{rv:?}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tcp_rendezvous_times_out_with_a_message() {
    let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let e = Rendezvous::Tcp(addr).exchange(1, 2, Duration::from_millis(300), || fake_id(0)).unwrap_err();
    assert!(e.contains("cannot reach rank 0"), "{e}");
}

fn gpus() -> usize {
    boost_cuda::probe().map(|i| i.devices).unwrap_or(0)
}

/// A group of one rank: every collective leaves the data as it is (a single-GPU machine).
#[test]
fn group_of_one_rank_on_one_gpu() {
    if gpus() == 0 {
        eprintln!("SKIPPED: no GPU");
        return;
    }
    let be = Cuda::new(0, Precision::F32).unwrap();
    let g = match NcclGroup::new(&be, 0, 1, Rendezvous::Id(NcclGroup::unique_id().unwrap()), T) {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    };
    let data: Vec<f64> = (0..10).map(|i| i as f64).collect();
    let mut b = be.alloc(10);
    be.write_mat(MatMut::new(&mut b, 1, 10), &data);
    g.all_reduce(&mut b, 2, 5, ReduceOp::Sum, Label::op("t"));
    g.all_reduce(&mut b, 0, 10, ReduceOp::Max, Label::op("t"));
    g.all_gather(&mut b, 1, 4, Label::op("t"));
    g.reduce_scatter(&mut b, 0, 3, Label::op("t"));
    g.broadcast(&mut b, 0, 10, 0, Label::op("t"));
    g.barrier();
    assert_eq!(be.read_mat::<f64>(Mat::new(&b, 1, 10)), data);
    // Started calls on the group's stream, with kernels queued on the compute stream while
    // they are in flight; the buffer comes back as it went.
    let g = g.overlapping(true);
    let call = g.start_all_reduce(b, 0, 10, ReduceOp::Sum, Label::op("t"));
    let mut other = be.alloc(10);
    be.write_mat(MatMut::new(&mut other, 1, 10), &data);
    let call2 = g.start_all_gather(other, 0, 10, Label::op("t"));
    let (b, other) = (call.wait(), call2.wait());
    assert_eq!(be.read_mat::<f64>(Mat::new(&b, 1, 10)), data);
    assert_eq!(be.read_mat::<f64>(Mat::new(&other, 1, 10)), data);
}

/// One thread per GPU, one NCCL group over all of them: sums, maxima, gathers, scatters,
/// broadcasts and a ring of sends agree with their definitions.
#[test]
fn group_over_every_gpu() {
    let n = gpus();
    if n < 2 {
        eprintln!("SKIPPED: {n} GPU(s); NCCL needs one GPU per rank");
        return;
    }
    let id = NcclGroup::unique_id().unwrap();
    std::thread::scope(|s| {
        for r in 0..n {
            s.spawn(move || {
                let be = Cuda::new(r, Precision::F32).unwrap();
                let g = NcclGroup::new(&be, r, n, Rendezvous::Id(id), T).unwrap();
                let k = 3;
                let mut b = be.alloc(n * k);
                let mine: Vec<f64> = (0..n * k).map(|i| (r * 100 + i) as f64).collect();
                be.write_mat(MatMut::new(&mut b, 1, n * k), &mine);
                g.all_reduce(&mut b, 0, n * k, ReduceOp::Sum, Label::op("sum"));
                let sum: Vec<f64> = (0..n * k).map(|i| (0..n).map(|q| (q * 100 + i) as f64).sum()).collect();
                assert_eq!(be.read_mat::<f64>(Mat::new(&b, 1, n * k)), sum);
                be.write_mat(MatMut::new(&mut b, 1, n * k), &mine);
                g.reduce_scatter(&mut b, 0, k, Label::op("rs"));
                let part: Vec<f64> = be.read_mat(Mat::at(&b, r * k, 1, k, k));
                assert_eq!(part, sum[r * k..(r + 1) * k]);
                g.all_gather(&mut b, 0, k, Label::op("ag"));
                assert_eq!(be.read_mat::<f64>(Mat::new(&b, 1, n * k)), sum);
                be.write_mat(MatMut::new(&mut b, 1, n * k), &mine);
                g.broadcast(&mut b, 0, n * k, 1, Label::op("bc"));
                let from1: Vec<f64> = (0..n * k).map(|i| (100 + i) as f64).collect();
                assert_eq!(be.read_mat::<f64>(Mat::new(&b, 1, n * k)), from1);
                g.barrier();
                // Started on the group's stream: two sums in flight at once, each the same
                // bits as the blocking sum.
                let g = g.overlapping(true);
                be.write_mat(MatMut::new(&mut b, 1, n * k), &mine);
                let mut c = be.alloc(n * k);
                be.write_mat(MatMut::new(&mut c, 1, n * k), &mine);
                let first = g.start_all_reduce(b, 0, n * k, ReduceOp::Sum, Label::op("sum"));
                let second = g.start_reduce_scatter(c, 0, k, Label::op("rs"));
                let (b, c) = (first.wait(), second.wait());
                assert_eq!(be.read_mat::<f64>(Mat::new(&b, 1, n * k)), sum);
                assert_eq!(be.read_mat::<f64>(Mat::at(&c, r * k, 1, k, k)), sum[r * k..(r + 1) * k]);
            });
        }
    });
}

/// A rank whose peer never joins (rank 0 of a group of two, alone on the GPU) gets an error
/// naming the initialisation within the deadline, instead of waiting forever in NCCL; a
/// group made afterwards works (the aborted one left nothing behind).
#[test]
fn a_rank_whose_peer_never_joins_stops_at_the_deadline() {
    if gpus() == 0 {
        eprintln!("SKIPPED: no GPU");
        return;
    }
    let be = Cuda::new(0, Precision::F32).unwrap();
    let deadline = Duration::from_secs(3);
    let t0 = std::time::Instant::now();
    let e = match NcclGroup::new(&be, 0, 2, Rendezvous::Id(NcclGroup::unique_id().unwrap()), deadline) {
        Ok(_) => panic!("a group of two initialised with one rank"),
        Err(e) => e,
    };
    let took = t0.elapsed();
    assert!(e.contains("ncclCommInitRankConfig (rank 0 of 2)"), "{e}");
    assert!(e.contains("did not complete within"), "{e}");
    assert!(took >= deadline && took < deadline + Duration::from_secs(30), "{took:?}");
    let g = NcclGroup::new(&be, 0, 1, Rendezvous::Id(NcclGroup::unique_id().unwrap()), T).unwrap();
    let mut b = be.alloc(4);
    be.write_mat(MatMut::new(&mut b, 1, 4), &[1.0, 2.0, 3.0, 4.0]);
    g.all_reduce(&mut b, 0, 4, ReduceOp::Sum, Label::op("t"));
    assert_eq!(be.read_mat::<f64>(Mat::new(&b, 1, 4)), vec![1.0, 2.0, 3.0, 4.0]);
}
