//! The BOOST paper's set-up through the cost model, printed:
//! `cargo test --release -p boost-report --test paper_table -- --ignored --nocapture`.

use boost_perf::Hardware;
use boost_perf::paper::{Method, paper_rows};
use boost_report::paper::paper_report;

#[test]
#[ignore = "prints the table; run with --ignored --nocapture"]
fn print_the_paper_table() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    print!("{}", paper_report(&hw));
    println!();
    println!(
        "| model | full-rank s | vanilla s | BTP s | BTP vs full | BTP vs vanilla | GEMM util vanilla | GEMM util BTP |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in paper_rows(&hw) {
        let t = |v| r.get(v).iteration_time_s;
        let u = |v| 100.0 * r.get(v).flops.gemm_utilization;
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.2}× | {:.2}× | {:.0} % | {:.0} % |",
            r.case.name,
            t(Method::FullRank),
            t(Method::Vanilla),
            t(Method::Btp),
            t(Method::FullRank) / t(Method::Btp),
            t(Method::Vanilla) / t(Method::Btp),
            u(Method::Vanilla),
            u(Method::Btp)
        );
    }
}

#[test]
#[ignore = "prints the GEMM plans of one layer; run with --ignored --nocapture"]
fn print_the_7b_gemm_plans() {
    use boost_perf::{CostOp, Timer, layer_ops};
    let hw = Hardware::preset("a100-80gb").unwrap();
    let seven = boost_perf::paper::CASES.iter().find(|c| c.preset == "7b").unwrap();
    for v in [Method::FullRank, Method::Vanilla, Method::Btp] {
        let s = boost_perf::paper::paper_setup(seven, v);
        let timer = Timer::new(&hw, &s);
        let tiles = timer.tile_model().unwrap();
        println!("{}:", v.name());
        let ops = layer_ops(&s, 0);
        for g in ops.forward.iter().chain(&ops.backward).filter_map(CostOp::as_gemm) {
            let p = tiles.plan(g);
            println!(
                "  {:<22} {:<24} tile {:?} split {} tiles {:>5} waves {:>3}  η {:.3}  {:.3} ms",
                g.label,
                g.shape(),
                p.tile,
                p.split_k,
                p.tiles,
                p.waves,
                timer.gemm_efficiency(g),
                1e3 * timer.gemm(g)
            );
        }
    }
}

#[test]
#[ignore = "redraws crates/report/paper-a100.png as `boost plan --paper --chart` draws it"]
fn draw_the_paper_chart() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let bars = boost_perf::paper::chart_bars(&hw);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("paper-a100.png");
    let title = format!("BOOST paper set-up on {}: iteration time relative to full-rank", hw.name);
    boost_report::chart::draw_breakdown(&path, true, &title, "time / full-rank time", &bars).unwrap();
}

#[test]
fn the_report_sets_every_paper_row_beside_the_plan_with_its_error() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let report = paper_report(&hw);
    let rows = paper_rows(&hw);
    assert_eq!(rows.len(), boost_perf::paper::CASES.len());
    for r in &rows {
        let line = report
            .lines()
            .find(|l| l.starts_with(&format!("| {} | ", r.case.name)) && l.matches(" / ").count() == 6)
            .unwrap_or_else(|| panic!("no paper-vs-plan row for {}:\n{report}", r.case.name));
        for (i, v) in [Method::FullRank, Method::Vanilla, Method::Btp].into_iter().enumerate() {
            let cell = line.split(" | ").nth(i + 1).unwrap().trim_end_matches(" |");
            let parts: Vec<&str> = cell.split(" / ").collect();
            let (paper, plan) = (r.case.measured_s[i], r.get(v).iteration_time_s);
            assert_eq!(parts[0].parse::<f64>().unwrap(), paper, "{}: {cell}", r.case.name);
            assert!((parts[1].parse::<f64>().unwrap() - plan).abs() < 5e-4, "{}: {cell}", r.case.name);
            let err: f64 = parts[2].trim_end_matches(" %").parse().unwrap();
            assert!((err - 100.0 * (plan - paper) / paper).abs() <= 0.5, "{}: {cell}", r.case.name);
        }
    }
}

#[test]
fn chart_renders_a_png() {
    let hw = Hardware::preset("a100-80gb").unwrap();
    let s = boost_perf::Setup::preset("1b", boost_config::Arch::Cola).unwrap();
    let p = boost_perf::predict(&s, &hw);
    let dir = std::env::temp_dir().join(format!("boost-perf-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.png");
    boost_report::chart::draw_breakdown(&path, false, "test", "s", &[("a".into(), p.breakdown.clone(), 1.0)]).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    std::fs::remove_dir_all(&dir).unwrap();
}
