//! Frame render time with eight panes streaming and the inspector open (goal: under 5 ms per
//! frame). Ignored by default; run with
//! `cargo test --release --test tui tui_bench -- --ignored --nocapture`.

use cohort::tui::bench;

#[test]
#[ignore = "a measurement: run it explicitly with --ignored --nocapture"]
fn frame_render_time_with_eight_streaming_panes() {
    for (width, height) in [(80, 24), (240, 70)] {
        let times = bench::measure(width, height, 300);
        println!("{times}");
        assert!(times.p50.as_secs_f64() < 0.005, "median frame over 5 ms: {times}");
    }
}
