//! The table `boost plan --paper` prints: the BOOST paper's set-up through the cost model
//! ([`boost_perf::paper`]), each row beside the paper's measured times.

use boost_config::Recompute;
use boost_perf::hardware::Hardware;
use boost_perf::paper::{MEASURED_SOURCE, Method, paper_rows, paper_setup};
use boost_perf::predict::predict;
use boost_perf::setup::Setup;
use std::fmt::Write;

/// The table `boost plan --paper` prints.
pub fn paper_report(hw: &Hardware) -> String {
    let rows = paper_rows(hw);
    let mut o = String::new();
    let gib = (1u64 << 30) as f64;
    let _ = writeln!(o, "BOOST paper set-up (docs/COST_MODEL.md §7) on {}: {}", hw.name, hw.description);
    let _ = writeln!(
        o,
        "bf16, seq 4096, micro-batch 4, vocab 32000, DP 1, 1F1B; low-rank = CoLA r = d/4; attention FLOPs counted causal."
    );
    let _ = writeln!(
        o,
        "Recompute: full-layer for every 30B run and for 7B vanilla; none otherwise. BTP (paper's norm) = local norm for tp > 1."
    );
    let _ = writeln!(o);
    table_header(
        &mut o,
        "model | layout | full-rank s | vanilla s | BTP local s | BTP online s | BTP vs full | BTP vs vanilla | online vs full | online vs vanilla",
    );
    for r in &rows {
        let c = &r.case;
        let layout = match (c.tp, c.pp) {
            (1, 1) => "1 GPU".to_string(),
            (t, 1) => format!("TP{t}"),
            (t, p) => format!("TP{t}·PP{p} (acc {})", c.accumulation),
        };
        let t = |v| r.get(v).iteration_time_s;
        let flag = |v| if r.get(v).fits { "" } else { " (OOM)" };
        let _ = writeln!(
            o,
            "| {} | {} | {:.3}{} | {:.3}{} | {:.3}{} | {:.3}{} | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
            c.name,
            layout,
            t(Method::FullRank),
            flag(Method::FullRank),
            t(Method::Vanilla),
            flag(Method::Vanilla),
            t(Method::Btp),
            flag(Method::Btp),
            t(Method::BtpOnline),
            flag(Method::BtpOnline),
            t(Method::FullRank) / t(Method::Btp),
            t(Method::Vanilla) / t(Method::Btp),
            t(Method::FullRank) / t(Method::BtpOnline),
            t(Method::Vanilla) / t(Method::BtpOnline),
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "Paper (measured): 1.46–1.91× vs full-rank TP, 1.87–2.27× vs vanilla low-rank TP.");
    let _ = writeln!(o);
    let _ = writeln!(o, "Against the paper's measured iteration times ({MEASURED_SOURCE}): paper / plan / error");
    let _ = writeln!(o);
    table_header(&mut o, "model | full-rank | vanilla | BTP (paper's norm)");
    for r in &rows {
        let cell = |i: usize, v| {
            let (paper, plan) = (r.case.measured_s[i], r.get(v).iteration_time_s);
            format!("{paper:.2} / {plan:.3} / {:+.0} %", 100.0 * (plan - paper) / paper)
        };
        let (f, v, b) = (cell(0, Method::FullRank), cell(1, Method::Vanilla), cell(2, Method::Btp));
        let _ = writeln!(o, "| {} | {f} | {v} | {b} |", r.case.name);
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Breakdown per iteration (s): compute (GEMM / attention / elementwise) · TP comm · bubble · memory per rank"
    );
    let _ = writeln!(o);
    table_header(
        &mut o,
        "model | run | recompute | GEMM | attn | elementwise | TP comm | PP comm | bubble | GEMM util | MFU | memory GiB",
    );
    for r in &rows {
        for (v, p) in &r.variants {
            let b = &p.breakdown;
            let rc = boost_perf::setup::recompute_name(paper_setup(&r.case, *v).recompute);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} % | {:.0} % | {:.1}{} |",
                r.case.name,
                v.name(),
                rc,
                b.gemm_s,
                b.attention_s,
                b.elementwise_s,
                b.tp_comm_s,
                b.pp_comm_s,
                b.bubble_s,
                100.0 * p.flops.gemm_utilization,
                100.0 * p.flops.mfu,
                p.memory.total / gib,
                if p.fits { "" } else { " OOM" }
            );
        }
    }
    let mut oom = Vec::new();
    for r in &rows {
        for (v, p) in &r.variants {
            let s = paper_setup(&r.case, *v);
            if !p.fits && s.recompute != Recompute::Full {
                let alt = Setup { recompute: Recompute::Full, ..s };
                let q = predict(&alt, hw);
                oom.push(format!(
                    "{} {}: {:.1} GiB without recompute does not fit; with full-layer recompute {:.3} s, {:.1} GiB{}",
                    r.case.name,
                    v.name(),
                    p.memory.total / gib,
                    q.iteration_time_s,
                    q.memory.total / gib,
                    if q.fits { "" } else { " (still OOM)" }
                ));
            }
        }
    }
    if !oom.is_empty() {
        let _ = writeln!(o);
        let _ =
            writeln!(o, "Runs the memory model says do not fit in {:.0} GiB as configured:", hw.usable_memory() / gib);
        for line in oom {
            let _ = writeln!(o, "- {line}");
        }
    }
    let _ = writeln!(o);
    let seven = rows.iter().find(|r| r.case.preset == "7b").expect("7b row");
    let _ = writeln!(o, "Per-layer TP communication at 7B (TP4, b = 4, s = 4096, bf16), forward / backward payload:");
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| run | forward calls | forward GiB | backward calls | backward GiB | docs/PARALLELISM.md §2.4 forward |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    for (v, want) in
        [(Method::FullRank, "0.25"), (Method::Vanilla, "1.30"), (Method::Btp, "0.22"), (Method::BtpOnline, "0.22")]
    {
        let c = &seven.get(v).layer_comm;
        let _ = writeln!(
            o,
            "| {} | {} | {:.3} | {} | {:.3} | {} |",
            v.name(),
            c.forward_calls,
            c.forward_bytes / gib,
            c.backward_calls,
            c.backward_bytes / gib,
            want
        );
    }
    o
}

/// A Markdown table's header row (`columns` separated by ` | `) and its rule.
fn table_header(o: &mut String, columns: &str) {
    let _ = writeln!(o, "| {columns} |");
    let _ = writeln!(o, "|{}", "---|".repeat(columns.split(" | ").count()));
}
